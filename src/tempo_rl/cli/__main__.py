import sys

from tempo_rl.cli import main

sys.exit(main())
