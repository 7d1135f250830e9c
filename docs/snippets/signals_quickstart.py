# TEMPO's signals in your own GRPO code: one start state, N = 4 macro-step branches, K = 4 critic samples.
import numpy as np

from tempo_rl.signals import (
    branch_returns,
    critic_rewards,
    degenerate_groups,
    group_advantages,
    td_targets,
)

# What your rollout produced for the N branches (add leading axes to batch many start states at once).
segment_rewards = np.array([0.0, 0.0, 1.0, 0.0])  # reward collected inside each H-round segment
endpoint_values = np.array([0.6, 0.2, 0.9, 0.3])  # critic's V at each branch's endpoint (mean of its samples)
terminated = np.array([False, False, True, True])  # episode ended inside the segment -> endpoint value unused

returns = branch_returns(segment_rewards, endpoint_values, terminated)  # R_n = r_n + (1 - done_n) * V_n
target = td_targets(returns)  # G = mean_n R_n: the start state's TD target
actor_advantages = group_advantages(returns)  # A_n = R_n - G, one per branch: put it on its sampled tokens
assert np.allclose(returns, [0.6, 0.2, 1.0, 0.0]) and np.isclose(target, 0.45)
assert np.allclose(actor_advantages, [0.15, -0.25, 0.55, -0.45])

# K critic samples on the start state; NaN = the "<value>...</value>" output did not parse.
estimates = np.array([0.5, np.nan, 0.45, 0.9])
critic_reward = critic_rewards(estimates, target, r_max=1.0)  # -|V_k - G| / R_max, unparsed -> -1
critic_advantages = group_advantages(critic_reward)  # centred over the K samples
assert np.allclose(critic_reward, [-0.05, -1.0, 0.0, -0.45])
assert np.allclose(critic_advantages, [0.325, -0.625, 0.375, -0.075])

# Many start states at once: stack groups on leading axes; pad ragged groups and mask the padding (False).
batch_returns = np.array([[0.6, 0.2, 1.0, 0.0], [1.0, 0.0, 0.5, 0.0]])
mask = np.array([[True, True, True, True], [True, True, True, False]])  # state 2 kept only 3 branches
batch_advantages = group_advantages(batch_returns, mask=mask)
assert np.allclose(td_targets(batch_returns, mask=mask), [0.45, 0.5])
assert np.allclose(batch_advantages[1], [0.5, -0.5, 0.0, 0.0])  # padding comes back as 0

# Groups whose advantages are all zero carry no gradient: skip them. Otherwise every sampled token of
# branch n gets A_n in your policy-gradient loss (prompt and environment tokens get 0).
keep = ~degenerate_groups(batch_advantages, mask=mask)
sampled_tokens_per_branch = [12, 7, 9, 15]
token_advantages = [np.full(n, a) for n, a in zip(sampled_tokens_per_branch, batch_advantages[0])]
assert keep.tolist() == [True, True] and token_advantages[2][0] == batch_advantages[0, 2]
