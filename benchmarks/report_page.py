"""``tempo-rl report`` on a run the size of the main job: file sizes, write time and, in headless Chromium, the
time to a usable page, to expand a TD update and a start state, and to search.

The run directory is synthetic but has the trainer's record schema (``trajectories.jsonl`` as
:func:`tempo_rl.training.tempo.td_records` and the warm-up write it): by default the main job's shape
(``src/tempo_rl/training/main_job.toml``: 40 warm-up updates of 2 games x N = 4 full episodes of T = 12 rounds,
150 TD updates of 6 start states x 4 branches x H = 4 rounds, K = 4 critic samples), with observations of
``--obs-chars`` characters (KeyDoor's are ~80; ALFWorld's ~300). Prints exactly one JSON line.

Usage: ``python benchmarks/report_page.py [--quick] [--obs-chars 80] [--no-browser]``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def _text(rng: random.Random, chars: int) -> str:
    words = ["room", "key", "door", "red", "blue", "sign", "you", "carry", "nothing", "exit", "on", "the"]
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < chars:
        out.append(rng.choice(words))
    return " ".join(out)


def _critic(rng: random.Random, target: float, k: int) -> dict[str, Any]:
    values = [rng.choice([0.0, 1.0]) for _ in range(k)]
    rewards = [-((v - target) ** 2) for v in values]
    mean = sum(rewards) / k
    return {
        "target": target,
        "degenerate": len(set(values)) == 1,
        "trained": len(set(values)) > 1,
        "prompt_too_long": False,
        "omitted_turns": 0,
        "samples": [
            {"text": f"<value>{v:g}</value>", "value": v, "status": "ok", "reward": r, "advantage": r - mean}
            for v, r in zip(values, rewards)
        ],
    }


def synthetic_run(
    run_dir: Path, *, warmup: int, td: int, starts: int, n: int, k: int, t: int, h: int, obs: int
) -> None:
    """Write ``config.toml``, ``metrics.jsonl``, ``trajectories.jsonl`` and ``summary.json`` of a run."""
    rng = random.Random(0)
    run_dir.mkdir(parents=True)
    (run_dir / "config.toml").write_text(
        f'algorithm = "tempo"\n[tempo]\nwarmup_updates = {warmup}\ntd_updates = {td}\n', encoding="utf-8"
    )
    lines, metrics = [], []
    for u in range(warmup + td):
        phase = "warmup" if u < warmup else "td"
        for s in range(2 if phase == "warmup" else starts):
            fresh = phase == "warmup" or s < starts // 2
            depth = 0 if fresh else h * rng.randint(1, 2)
            rounds = t if phase == "warmup" else h
            returns = []
            for j in range(n):
                rewards = [0.0] * (rounds - 1) + [float(rng.random() < 0.3)]
                rec: dict[str, Any] = {
                    "update": u,
                    "phase": phase,
                    "game_id": f"keydoor:{rng.randint(0, 400)}",
                    "start_id": f"{u:04d}{s:02d}",
                    "start_round": depth,
                    "fresh": fresh,
                    "start_policy_version": max(0, u - 3),
                    "start_macro_index": depth // h,
                    "actions": [
                        rng.choice(["go on", "take red", "take blue", "open door"]) for _ in range(rounds)
                    ],
                    "observations": [_text(rng, obs) for _ in range(rounds)],
                    "invalid_turns": [rng.random() < 0.1 for _ in range(rounds)],
                    "rewards": rewards,
                    "end_reason": "terminated"
                    if rewards[-1]
                    else ("max_rounds" if phase == "warmup" else "macro_boundary"),
                    "won": bool(rewards[-1]),
                    "return": sum(rewards),
                    "error": None,
                    "branch": j,
                    "policy_version": u,
                }
                rec["invalid_actions"] = sum(rec["invalid_turns"])
                if phase == "td":
                    v = 0.0 if rewards[-1] else rng.random()
                    rec.update(endpoint_value=v, kept=True, advantage=0.0)
                    rec["return"] = sum(rewards) + v
                else:
                    rec["boundaries"] = [
                        {"round": r, "target": rewards[-1], "critic": _critic(rng, rewards[-1], k)}
                        for r in (h, 2 * h)
                    ]
                returns.append(rec["return"])
                lines.append(rec)
            g = sum(returns) / n
            group = lines[-n:]
            for rec in group:
                if phase == "td":
                    rec["advantage"] = rec["return"] - g
            group[0]["start"] = {
                "task": "Reach the exit at the end of the corridor.",
                "history_actions": ["go on"] * depth,
                "observation": _text(rng, obs),
                "parent_id": None,
                "critic": _critic(rng, g, k),
            }
        metrics.append(
            {"step": u + 1, "time": 1.0e9 + u, "critic/abs_error_mean": rng.random(), "store/size": float(u)}
        )
    with open(run_dir / "trajectories.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in lines)
    with open(run_dir / "metrics.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(m) + "\n" for m in metrics)
    (run_dir / "summary.json").write_text("{}", encoding="utf-8")


def browser_times(page: Path, td_update: int) -> dict[str, float]:
    """Seconds to a usable page, to expand a TD update then its first start state, and to search."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(service=service, options=options)
    driver.implicitly_wait(30)  # an expanded element is built on the toggle event, just after the click
    try:
        driver.get("about:blank")
        t0 = time.perf_counter()
        driver.get(page.as_uri())
        WebDriverWait(driver, 120).until(lambda d: d.find_elements("css selector", "details.update"))
        load = time.perf_counter() - t0
        update = driver.find_element("css selector", f'details.update[data-update="{td_update}"]')
        t0 = time.perf_counter()
        update.find_element("tag name", "summary").click()
        start = update.find_element("css selector", "details.start")
        start.find_element("tag name", "summary").click()
        start.find_element("css selector", "table.branches tbody tr")
        expand = time.perf_counter() - t0
        count = driver.find_element("id", "f-count")
        before = count.text
        t0 = time.perf_counter()
        driver.find_element("id", "f-q").send_keys("take blue")
        WebDriverWait(driver, 60).until(lambda _: count.text != before)
        search = time.perf_counter() - t0 - 0.2  # less the search box's 200 ms debounce
        return {"load_s": round(load, 3), "expand_s": round(expand, 3), "search_s": round(search, 3)}
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a run of 2 + 4 updates (a smoke run)")
    parser.add_argument("--obs-chars", type=int, default=80, help="characters per observation")
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium timings")
    args = parser.parse_args()
    shape = dict(warmup=2, td=4) if args.quick else dict(warmup=40, td=150)
    from tempo_rl.training.report import write_report

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        synthetic_run(run, **shape, starts=6, n=4, k=4, t=12, h=4, obs=args.obs_chars)
        t0 = time.perf_counter()
        page = write_report(run)
        write_s = time.perf_counter() - t0
        out: dict[str, Any] = {
            "benchmark": "report_page",
            "updates": shape["warmup"] + shape["td"],
            "records": (run / "trajectories.jsonl").read_text(encoding="utf-8").count("\n"),
            "obs_chars": args.obs_chars,
            "trajectories_mb": round((run / "trajectories.jsonl").stat().st_size / 1e6, 3),
            "report_mb": round(page.stat().st_size / 1e6, 3),
            "write_s": round(write_s, 3),
        }
        have_browser = shutil.which("chromium") and shutil.which("chromedriver")
        if not args.no_browser and have_browser:
            out.update(browser_times(page, shape["warmup"]))
        elif not args.no_browser:
            out["browser"] = "chromium / chromedriver not found: no page timings"
    print(json.dumps(out))


if __name__ == "__main__":
    main()
