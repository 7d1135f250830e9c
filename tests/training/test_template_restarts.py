"""A chat template that rewrites history (drops earlier <think> blocks) restarts the branch's token sequence:
the branch is kept, yields one training sequence per restart, and the restarts are counted."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import numpy as np
import pytest
from trainer_doubles import ScriptedSampler, scripted_components, tiny_config

from tempo_rl.rollout.branches import BranchResult, TokenSequence
from tempo_rl.rollout.renderer import ChatRenderer
from tempo_rl.rollout.templates import think_dropping_template
from tempo_rl.training.tempo import TempoTrainer

THINK = "<think>plan</think>"


class ThinkingSampler(ScriptedSampler):
    """The scripted KeyDoor actor, reasoning in a <think> block before every tool call."""

    def _answer(self, prompt_text: str, rng: np.random.Generator) -> str:
        answer = super()._answer(prompt_text, rng)
        return answer if "value estimator" in prompt_text else THINK + answer


def _trainer(cfg: Any) -> tuple[TempoTrainer, Any, list[dict[str, Any]]]:
    comps, sampler, training = scripted_components(cfg, p_right=0.5)
    thinking = ThinkingSampler(sampler.tokenizer, p_right=0.5)
    training.sampler = thinking
    comps.sampler = thinking
    tok = copy.deepcopy(sampler.tokenizer)
    # every tool turn counts as a new query: each earlier assistant turn loses its <think> block
    tok.chat_template = think_dropping_template(("user", "tool"))
    comps.chat = ChatRenderer(tok)
    trajectories: list[dict[str, Any]] = []
    trainer = TempoTrainer(cfg, comps, write_trajectories=trajectories.extend)
    return trainer, training, trajectories


def _actor_datums(training: Any) -> list[Any]:
    return [
        d
        for name, payload in training.calls
        if name == "forward_backward"
        for d in payload
        if d.tags.get("role") == "actor"
    ]


def test_restarted_branches_are_kept_and_yield_one_datum_per_sequence() -> None:
    cfg = tiny_config("tempo.warmup_updates=0", "tempo.td_updates=2", "tempo.fresh_share=0.5")
    trainer, training, trajectories = _trainer(cfg)
    tok = trainer.c.chat.tokenizer
    metrics = asyncio.run(trainer.td_update(0))

    # 2 fresh starts x 4 branches x H = 4 rounds; every extension is a history rewrite -> a restart
    assert metrics["rollout/turns"] == 32.0
    assert metrics["rollout/template_restarts"] == 32.0 == trainer.c.chat.stats.restarts
    assert metrics["actor/dropped_branches"] == 0.0
    assert all(r["end_reason"] == "macro_boundary" for r in trajectories)
    assert len(trajectories) == 8

    # one Datum per sampled turn of every branch with a non-zero advantage; same advantage within a branch
    datums = _actor_datums(training)
    n_adv = sum(abs(r["advantage"]) > 1e-12 for r in trajectories)
    assert n_adv >= 1
    assert len(datums) == 4 * n_adv == metrics["train/actor_datums"]
    branch_advs = sorted(round(r["advantage"], 6) for r in trajectories if abs(r["advantage"]) > 1e-12)
    datum_advs = []
    for d in datums:
        adv = d.loss_fn_inputs["advantages"]
        nz = np.flatnonzero(adv)
        assert len(set(adv[nz].tolist())) == 1  # one advantage on the single sampled turn
        datum_advs.append(round(float(adv[nz[0]]), 6))
        # the sampled tokens keep their sampled logprobs (-0.25 each in the scripted sampler)
        assert np.allclose(d.loss_fn_inputs["logprobs"][nz], -0.25)
        # the context is the template's fresh render: earlier turns' <think> blocks are gone; only the sampled
        # turn reasons
        tokens = [*d.model_input, int(d.loss_fn_inputs["target_tokens"][-1])]
        first = int(nz[0]) + 1  # target_tokens are shifted by one
        context = tok.decode(tokens[:first], skip_special_tokens=False)
        sampled = tok.decode(tokens[first:], skip_special_tokens=False)
        assert "<think>" not in context and sampled.startswith(THINK)
    assert sorted(datum_advs) == sorted(a for a in branch_advs for _ in range(4))

    # stored endpoints carry the restarted prefix: the template's own full render of the conversation
    assert metrics["td/new_endpoints"] >= 1
    chat = trainer.c.chat
    for state in trainer.c.store.sample(len(trainer.c.store), np.random.default_rng(0)):
        text = tok.decode(list(state.token_prefix), skip_special_tokens=False)
        assert "<think>" not in text and text.endswith("<|im_start|>assistant\n")
        assert text.count("<tool_response>") == 4  # all four observations of the segment
        assert state.spans == ()  # no sampled token survives
        assert chat.encode(text) == tuple(state.token_prefix)

    # a second update restores stored (restarted) states and continues them
    metrics2 = asyncio.run(trainer.td_update(1))
    assert metrics2["td/reused_states"] >= 1.0
    assert metrics2["rollout/template_restarts"] == metrics2["rollout/turns"]
    assert metrics2["actor/dropped_branches"] == 0.0


def test_branch_sequences_and_restart_bookkeeping() -> None:
    b = BranchResult(
        start_index=0, tokens=[1, 2], prefix_len=2, logprobs=[0.0, 0.0], sampled_mask=[False] * 2
    )
    b.turn_starts.append(2)
    b.turn_seq.append(b.restarts)
    b.tokens += [7, 8]
    b.logprobs += [-0.5, -1.0]
    b.sampled_mask += [True, True]
    from tempo_rl.rollout.renderer import PromptState

    b.restart(PromptState(tokens=(1, 3, 4), messages=({"role": "user", "content": "x"},), head=1))
    assert b.restarts == 1 and b.prompt.tokens == (1, 3, 4)
    assert b.sequences() == [
        TokenSequence((1, 2, 7, 8), (0.0, 0.0, -0.5, -1.0), (False, False, True, True)),
        TokenSequence((1, 3, 4), (0.0, 0.0, 0.0), (False, False, False)),
    ]
    assert b.sequence(1) == b.current() and b.sampled_logprob_sum == pytest.approx(-1.5)
    with pytest.raises(IndexError, match="2 token sequences"):
        b.sequence(2)
