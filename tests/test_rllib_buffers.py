"""replaybuf.rllib's episode buffers side by side with RLlib 2.60's own (from the installed
wheel): the same episodes in, the same steps drawn (RLlib's draws scripted to pick what ours
picked) -> the same transitions, n-step returns, weights, evictions, counters. Runs in
.venv-rllib (Makefile: RLlib's pins beside the main venv's); skipped in every other venv."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

if Path(sys.prefix).name != ".venv-rllib":  # there ray.rllib must import: a missing one fails
    pytest.skip("RLlib runs in .venv-rllib (make test)", allow_module_level=True)
import gymnasium as gym  # noqa: E402
from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: E402
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer  # noqa: E402
from ray.rllib.utils.replay_buffers import EpisodeReplayBuffer as StockUniform  # noqa: E402
from ray.rllib.utils.replay_buffers import PrioritizedEpisodeReplayBuffer as StockPrioritized  # noqa: E402

from replaybuf.rllib import EpisodeReplayBuffer, PrioritizedEpisodeReplayBuffer  # noqa: E402
from rllib_episodes import BOX, DICT, TUPLE, Scripted, rllib_index, same_structure_equal, stream  # noqa: E402

PAIRS = [(EpisodeReplayBuffer, StockUniform), (PrioritizedEpisodeReplayBuffer, StockPrioritized)]


def filled(ours_cls, stock_cls, capacity, chunks, check_each=True):
    ours, stock = ours_cls(capacity, seed=1), stock_cls(capacity)
    for chunk in chunks:
        ours.add(chunk)
        stock.add(chunk)
        if check_each:
            assert_same_counters(ours, stock)
    return ours, stock


def assert_same_counters(ours, stock):
    assert ours.get_num_timesteps() == stock.get_num_timesteps() == len(ours)
    assert ours.get_num_episodes() == stock.get_num_episodes()
    assert ours.get_num_episodes_evicted() == stock.get_num_episodes_evicted()
    assert ours.get_added_timesteps() == stock.get_added_timesteps()
    assert ours.get_sampled_timesteps() == stock.get_sampled_timesteps()
    assert ours.episode_ids() == [e.id_ for e in stock.episodes]


# RLlib's uniform buffer fails (IndexError in its index splice) when it evicts the episode an
# add just extended, which interleaved chunks make likely: side by side it gets one lane
@pytest.mark.parametrize(
    ("ours_cls", "stock_cls", "lanes"), [(*PAIRS[0], 1), (*PAIRS[1], 3)], ids=["uniform", "prioritized"]
)
def test_the_same_episodes_are_kept_and_evicted_as_rllib_keeps_them(ours_cls, stock_cls, lanes):
    chunks = stream(0, 60, lanes=lanes)
    ours, stock = filled(ours_cls, stock_cls, 40, chunks)
    assert ours.get_num_episodes_evicted() > 20  # eviction ran, and agreed at every add
    # batches of several chunks per add (RLlib's prioritized buffer evicts before adding them)
    ours, stock = ours_cls(30, seed=1), stock_cls(30)
    for i in range(0, len(chunks), 4):
        ours.add(chunks[i : i + 4])
        stock.add(chunks[i : i + 4])
        assert_same_counters(ours, stock)
    assert_same_metrics(ours.get_metrics(), stock.get_metrics())


def assert_same_metrics(mine, theirs, skip=()):
    """The same metric tree (RLlib's names), the same values (ours are logged when read)."""
    assert mine.keys() == theirs.keys()
    for key, value in theirs.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            assert_same_metrics(mine[key], value, skip)
        else:  # Stats objects (the buffer's logger is not a root one): their current values
            assert mine[key].peek() == pytest.approx(value.peek(), rel=1e-9, nan_ok=True), key


def _assert_same_transition(mine, theirs, *, weights=True, infos=True, extras=False):
    assert same_structure_equal(mine.get_observations(0), theirs.get_observations(0))
    assert same_structure_equal(mine.get_observations(-1), theirs.get_observations(-1))
    assert np.array_equal(mine.get_actions(0), theirs.get_actions(0))
    assert mine.get_rewards(0) == pytest.approx(theirs.get_rewards(0), rel=1e-12, abs=1e-12)
    assert (mine.is_terminated, mine.is_truncated) == (theirs.is_terminated, theirs.is_truncated)
    assert mine.t_started == theirs.t_started and len(mine) == len(theirs) == 1
    assert mine.get_extra_model_outputs("n_step", 0) == theirs.get_extra_model_outputs("n_step", 0)
    if weights:
        w, w_stock = mine.get_extra_model_outputs("weights", 0), theirs.get_extra_model_outputs("weights", 0)
        assert w == pytest.approx(w_stock, rel=1e-9)
    if infos:
        assert mine.get_infos(0) == theirs.get_infos(0) and mine.get_infos(-1) == theirs.get_infos(-1)
    if extras:
        assert np.array_equal(mine.get_extra_model_outputs("q", 0), theirs.get_extra_model_outputs("q", 0))


def _force_stock_prioritized(stock, picks):
    """Make RLlib's prioritized buffer draw ``picks`` [(id, t, n)] in order."""
    tree_idx = [stock._indices[rllib_index(stock, id_, t)][2] for id_, t, _ in picks]
    stock.rng = Scripted(integers=[n for *_, n in picks], randoms=[0.5] * len(picks))
    order = iter(tree_idx)
    stock._sum_segment.find_prefixsum_idx = lambda _target: next(order)


@pytest.mark.parametrize("space", [BOX, DICT, TUPLE], ids=["box", "dict", "tuple"])
def test_prioritized_draws_give_rllibs_transitions_returns_and_weights(space):
    ours, stock = filled(PrioritizedEpisodeReplayBuffer, StockPrioritized, 60, stream(1, 40, space), check_each=False)
    kwargs = {"n_step": (1, 4), "gamma": 0.9, "beta": 0.5, "include_infos": True, "include_extra_model_outputs": True}
    for round_ in range(3):
        mine = ours.sample(16, **kwargs)
        picks = [(e.id_, e.t_started, e.get_extra_model_outputs("n_step", 0)) for e in mine]
        _force_stock_prioritized(stock, picks)
        theirs = stock.sample(16, **kwargs)
        for a, b in zip(mine, theirs, strict=True):
            _assert_same_transition(a, b, extras=True)
        priorities = np.random.default_rng(round_).uniform(0.1, 5.0, 16)
        ours.update_priorities(priorities, "default_policy")
        stock.update_priorities(priorities, "default_policy")
        # ours may have drawn again where an n-step passed an episode's end; RLlib was scripted not to
        assert_same_metrics(
            ours.get_metrics(),
            stock.get_metrics(),
            skip={"num_resamples", "num_agent_resamples", "num_module_resamples"},
        )
    assert_same_counters(ours, stock)


def _attributes(obj):
    """An episode's (or buffer's) attributes, nested, with the type of every leaf beside it."""
    if isinstance(obj, SingleAgentEpisode):  # slotted: a slot left unset raises here
        return {k: _attributes(getattr(obj, k)) for k in SingleAgentEpisode.__slots__}
    if isinstance(obj, InfiniteLookbackBuffer):
        return {"type": type(obj).__name__, **{k: _attributes(v) for k, v in vars(obj).items()}}
    if isinstance(obj, dict):
        return {k: _attributes(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [type(obj).__name__, *(_attributes(v) for v in obj)]
    if obj is None or isinstance(obj, (str, gym.Space)):
        return repr(obj)
    return [type(obj).__name__, obj]


@pytest.mark.parametrize("space", [BOX, DICT], ids=["box", "dict"])
@pytest.mark.parametrize("infos", [True, False])
def test_sampled_one_step_episodes_are_what_rllibs_constructor_builds(space, infos):
    ours = PrioritizedEpisodeReplayBuffer(capacity=60, alpha=0.6)
    ours.add(stream(3, 40, space))
    for episode in ours.sample(8, n_step=(1, 4), gamma=0.9, include_infos=infos, include_extra_model_outputs=True):
        built = SingleAgentEpisode(
            id_=episode.id_,
            agent_id=episode.agent_id,
            module_id=episode.module_id,
            observation_space=episode.observation_space,
            action_space=episode.action_space,
            observations=list(episode.observations.data),
            actions=list(episode.actions.data),
            rewards=list(episode.rewards.data),
            infos=list(episode.infos.data) if infos else None,
            terminated=episode.is_terminated,
            truncated=episode.is_truncated,
            extra_model_outputs={k: list(v.data) for k, v in episode.extra_model_outputs.items()},
            t_started=episode.t_started,
            len_lookback_buffer=0,
        )
        mine, theirs = _attributes(episode), _attributes(built)
        assert mine.keys() == theirs.keys()
        assert same_structure_equal(mine, theirs)
        assert repr(mine) == repr(theirs)
        episode.validate()
        assert episode.get_observations(-1) is episode.observations.data[-1]


def test_uniform_episode_draws_give_rllibs_n_step_transitions():
    ours, stock = filled(EpisodeReplayBuffer, StockUniform, 80, stream(2, 30, lanes=1), check_each=False)
    mine = ours.sample(24, n_step=3, gamma=0.95, sample_episodes=True)
    compared = 0
    for episode in mine:
        stored_length = next(len(e) for e in stock.episodes if e.id_ == episode.id_)
        if episode.t_started + 3 > stored_length:
            continue  # an n-step cut at the stored end: RLlib drops terminated there (docs/rllib.md)
        stock.rng = Scripted(integers=[rllib_index(stock, episode.id_, episode.t_started)])
        (theirs,) = stock.sample(1, n_step=3, gamma=0.95, sample_episodes=True)
        _assert_same_transition(episode, theirs)
        compared += 1
    assert compared >= 8


def test_uniform_sequences_and_the_b_t_batch_are_rllibs():
    ours, stock = filled(EpisodeReplayBuffer, StockUniform, 80, stream(3, 30, lanes=1), check_each=False)

    def scripted_draws(picks):
        order = iter(picks)
        store = ours._store

        def draw(rng, n):
            id_, t = next(order)
            return np.array([store.episodes[store.ordinals[id_]].rows[t]])

        store.draw_uniform = draw

    ids = ours.episode_ids()
    picks = [(id_, min(1, ours.episode_length(id_) - 1)) for id_ in ids[:12]]
    scripted_draws(picks)
    stock.rng = Scripted(integers=[rllib_index(stock, id_, t) for id_, t in picks])
    mine = ours.sample(batch_size_B=3, batch_length_T=9)
    theirs = stock.sample(batch_size_B=3, batch_length_T=9)
    assert mine.keys() == theirs.keys()
    for key in theirs:
        assert np.array_equal(mine[key], theirs[key]), key
    # sequences with a lookback (stateful modules)
    seq_picks = [(id_, ours.episode_length(id_) // 2) for id_ in ids[:10]]
    scripted_draws(seq_picks)
    stock.rng = Scripted(integers=[rllib_index(stock, id_, t) for id_, t in seq_picks])
    mine = ours.sample(batch_size_B=4, batch_length_T=3, n_step=1, lookback=1, sample_episodes=True)
    theirs = stock.sample(batch_size_B=4, batch_length_T=3, n_step=1, lookback=1, sample_episodes=True)
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs, strict=True):
        assert len(a) == len(b) and a.t_started == b.t_started
        assert np.array_equal(a.get_observations(slice(-1, None)), b.get_observations(slice(-1, None)))
        assert np.array_equal(a.get_rewards(), b.get_rewards()) and np.array_equal(a.get_actions(), b.get_actions())
        assert (a.is_terminated, a.is_truncated) == (b.is_terminated, b.is_truncated)


def test_evicting_the_episode_an_add_just_extended_keeps_the_counts():
    ours = EpisodeReplayBuffer(30, seed=0)
    for chunk in stream(0, 60):  # three lanes: RLlib's own buffer raises IndexError on these
        ours.add(chunk)
        lengths = [ours.episode_length(e) for e in ours.episode_ids()]
        assert ours.get_num_timesteps() == sum(lengths)
        assert sum(lengths) <= 30 or len(lengths) == 1
    assert ours.get_num_episodes_evicted() > 20


def test_free_prioritized_draws_follow_the_priorities():
    ours = PrioritizedEpisodeReplayBuffer(100, alpha=0.7, seed=3)
    ours.add(stream(4, 10, longest=6))
    ours.sample(8, n_step=1)
    ours.update_priorities(np.linspace(0.5, 6.0, 8))
    steps = [(e, t) for e in ours.episode_ids() for t in range(ours.episode_length(e))]
    mass = np.array([ours.priority(e, t) ** 0.7 for e, t in steps])
    draws = 6000
    counts = dict.fromkeys(steps, 0)
    for _ in range(draws // 1000):
        for episode in ours.sample(1000, n_step=1):
            counts[(episode.id_, episode.t_started)] += 1
    expected = mass / mass.sum() * draws
    observed = np.array([counts[s] for s in steps])
    assert np.all(np.abs(observed - expected) <= 5 * np.sqrt(expected) + 2)


def test_free_uniform_draws_are_uniform_over_steps():
    ours = EpisodeReplayBuffer(100, seed=4)
    ours.add(stream(5, 10, longest=6))
    steps = ours.get_num_timesteps()
    counts = {}
    for _ in range(6):
        for episode in ours.sample(1000, n_step=1, sample_episodes=True):
            key = (episode.id_, episode.t_started)
            counts[key] = counts.get(key, 0) + 1
    assert len(counts) == steps
    expected = 6000 / steps
    assert all(abs(c - expected) <= 5 * np.sqrt(expected) for c in counts.values())


@pytest.mark.parametrize("cls", [EpisodeReplayBuffer, PrioritizedEpisodeReplayBuffer])
def test_a_seed_repeats_the_draws_and_a_state_restores_them(cls, tmp_path):
    from replaybuf.rllib import restore_buffer, save_buffer

    def draws(buffer):
        if cls is PrioritizedEpisodeReplayBuffer:
            return [(e.id_, e.t_started, e.get_rewards(0)) for e in buffer.sample(20, n_step=(1, 3), beta=0.4)]
        return [(e.id_, e.t_started, e.get_rewards(0)) for e in buffer.sample(20, n_step=2, sample_episodes=True)]

    chunks = stream(6, 30)
    a, b = cls(50, seed=7), cls(50, seed=7)
    a.add(chunks)
    b.add(chunks)
    assert draws(a) == draws(b)
    state = a.get_state()
    restored = cls(50)
    restored.set_state(state)
    assert restored.get_num_timesteps() == a.get_num_timesteps() and restored.episode_ids() == a.episode_ids()
    save_buffer(a, tmp_path)
    from_disk = cls(50)
    restore_buffer(from_disk, tmp_path)
    if cls is PrioritizedEpisodeReplayBuffer:  # the last sample survives: its priorities can still come
        for buffer in (a, restored, from_disk):
            buffer.update_priorities(np.arange(1.0, 21.0))
    assert draws(a) == draws(restored) == draws(from_disk)
    more = stream(8, 5)
    for buffer in (a, from_disk):
        buffer.add(more)
    assert draws(a) == draws(from_disk)
    assert a.get_num_episodes_evicted() == from_disk.get_num_episodes_evicted()


def test_wrapped_episode_ordinals_change_no_draw(monkeypatch):
    """Episode ordinals (the stores' int32 row owners) wrap past their last value: the draws,
    weights, priority updates and a restored state's draws are those of ordinals that never wrapped."""
    import replaybuf.rllib._store as store_module

    def run():
        buffer, out = PrioritizedEpisodeReplayBuffer(40, seed=2), []
        for i, chunk in enumerate(stream(9, 150)):
            buffer.add(chunk)
            if i % 20 == 19:
                sampled = buffer.sample(6, n_step=(1, 3), beta=0.5)
                out.append(
                    [
                        (e.id_, e.t_started, e.get_rewards(0), list(e.extra_model_outputs["weights"].data))
                        for e in sampled
                    ]
                )
                buffer.update_priorities(np.arange(1.0, 7.0))
        restored = PrioritizedEpisodeReplayBuffer(40)
        restored.set_state(buffer.get_state())
        for b in (buffer, restored):
            out.append([(e.id_, e.t_started) for e in b.sample(12, n_step=1)])
        return out, int(buffer.get_state()["store"]["next_ordinal"])

    plain, ordinals = run()
    assert ordinals > 64
    monkeypatch.setattr(store_module, "LAST_ORDINAL", 63)  # more than the 40 episodes 40 steps can hold
    wrapped, ordinals = run()
    assert ordinals <= 63 and wrapped == plain


def test_wide_integer_values_come_back_as_given():
    """Integer leaves are stored narrow and widened when a value needs it: what comes back
    is what went in, as the space's dtype, before and after a state round trip."""
    obs_space = gym.spaces.Box(-(2**40), 2**40, (2,), np.int64)
    act_space = gym.spaces.Discrete(100_000)
    rng = np.random.default_rng(0)
    buffer, episodes = EpisodeReplayBuffer(200, seed=0), []
    for i, scale in enumerate((100, 30_000, 2**33)):  # int8, then int16/32, then int64 values
        observations = list(rng.integers(-scale, scale, (6, 2)))
        actions = [int(a) for a in rng.integers(0, min(scale, 100_000), 5)]
        episode = SingleAgentEpisode(
            id_=f"w{i}", observations=observations, actions=actions, rewards=[0.5] * 5, terminated=True,
            observation_space=obs_space, action_space=act_space, len_lookback_buffer=0,
        )  # fmt: skip
        buffer.add(episode)
        episodes.append((observations, actions))
    restored = EpisodeReplayBuffer(200)
    restored.set_state(buffer.get_state())
    for b in (buffer, restored):
        for e in b.sample(40, n_step=1, sample_episodes=True):
            observations, actions = episodes[int(e.id_[1:])]
            t = e.t_started
            assert np.array_equal(e.get_observations(0), observations[t]) and e.get_observations(0).dtype == np.int64
            assert e.get_actions(0) == actions[t] and np.asarray(e.get_actions(0)).dtype == np.int64


def test_a_state_saved_before_fresh_rows_were_kept_still_loads():
    """States of 2026-11-29 and before lack ``fresh`` (the rows never used): they load and
    draw what the saved buffer draws; later adds may take other free rows (same episodes)."""
    chunks = stream(11, 40)
    a = PrioritizedEpisodeReplayBuffer(60, seed=5)
    a.add(chunks)
    state = a.get_state()
    old = dict(state, store={k: v for k, v in state["store"].items() if k != "fresh"})
    restored = PrioritizedEpisodeReplayBuffer(60)
    restored.set_state(old)
    draws = [[(e.id_, e.t_started, e.get_rewards(0)) for e in b.sample(16, n_step=(1, 3))] for b in (a, restored)]
    assert draws[0] == draws[1]
    more = stream(12, 6)
    for b in (a, restored):
        b.add(more)
    assert restored.episode_ids() == a.episode_ids() and restored.get_num_timesteps() == a.get_num_timesteps()
    steps = {(e.id_, e.t_started, e.get_rewards(0)) for b in (a, restored) for e in b.sample(200, n_step=1)}
    assert {(i, t) for i, t, _ in steps} <= {(i, t) for i in a.episode_ids() for t in range(a.episode_length(i))}
    assert len({(i, t) for i, t, _ in steps}) == len(steps)  # one reward per step, whichever buffer drew it


def _snapshot(buffer):
    return buffer.get_state(), buffer.get_num_timesteps(), buffer.get_added_timesteps(), buffer.episode_ids()


def _assert_unchanged(buffer, before):
    state, *counters = before
    after_state, *after = _snapshot(buffer)
    assert after == counters
    for key in ("lengths", "rows", "free", "mass"):
        assert np.array_equal(after_state["store"][key], state["store"][key]), key


@pytest.mark.parametrize("cls", [EpisodeReplayBuffer, PrioritizedEpisodeReplayBuffer])
def test_bad_episodes_are_refused_whole_with_a_clear_error(cls):
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from replaybuf.errors import ArgumentError, SpecMismatchError
    from rllib_episodes import ACTIONS, chunk, episode_data

    buffer = cls(100, seed=0)
    good = stream(9, 4, lanes=1)
    buffer.add(good[:-1])
    before = _snapshot(buffer)
    rng = np.random.default_rng(0)
    other_space = episode_data(rng, 3, DICT, 99)
    cases = {
        # a new space mid-stream: the batch's good first episode must not be written either
        "observation_space": [stream(10, 1)[0], chunk(other_space, "x", 0, 3, DICT, True)],
        "observations": [
            SingleAgentEpisode(observations=[np.zeros(4, np.float32)] * 3, actions=[0, 1], rewards=[0.0, 1.0])
        ],
        "t_started": [chunk(episode_data(rng, 4, BOX, 5), good[-1].id_, 2, 4, BOX, True)],
    }
    for expected, episodes in cases.items():
        with pytest.raises((SpecMismatchError, ArgumentError), match=expected):
            buffer.add(episodes)
        _assert_unchanged(buffer, before)
    done = good[0].id_  # a stored, terminated episode takes no further chunk
    data = episode_data(rng, 2, BOX, 7)
    follow = SingleAgentEpisode(
        id_=done, observations=data["observations"], actions=data["actions"], rewards=data["rewards"],
        observation_space=BOX, action_space=ACTIONS, t_started=buffer.episode_length(done), len_lookback_buffer=0,
    )  # fmt: skip
    if next(e for e in good if e.id_ == done).is_done:
        with pytest.raises(ArgumentError, match="done"):
            buffer.add(follow)
        _assert_unchanged(buffer, before)
    with pytest.raises(ArgumentError, match="SingleAgentEpisode"):
        buffer.add([{"obs": 1}])
    _assert_unchanged(buffer, before)
    with pytest.raises(ArgumentError, match="at most 2147483647 rows"):  # int32 rows; refused before allocating
        cls(capacity=2**31)


def test_bad_priorities_and_module_ids_are_refused_before_any_change():
    from replaybuf.errors import ArgumentError, PriorityError

    buffer = PrioritizedEpisodeReplayBuffer(100, seed=0)
    buffer.add(stream(11, 6))
    buffer.sample(8, n_step=1)
    before = _snapshot(buffer)
    with pytest.raises(PriorityError, match="expected 8"):
        buffer.update_priorities(np.ones(7))
    with pytest.raises(PriorityError, match="finite"):
        buffer.update_priorities(np.r_[np.ones(7), np.nan])
    with pytest.raises(ArgumentError, match="module_id"):
        buffer.update_priorities(np.ones(8), "not_a_module")
    _assert_unchanged(buffer, before)
    buffer.update_priorities(np.full(8, 3.0), "default_policy")  # the last sample is still there
    with pytest.raises(PriorityError, match="expected 0"):  # and used up
        buffer.update_priorities(np.ones(8))
    with pytest.raises(ArgumentError, match="n_step"):
        buffer.sample(4, n_step=(3, 3))
    with pytest.raises(ArgumentError, match="beta"):
        buffer.sample(4, n_step=1, beta=-1.0)


def test_install_points_the_stock_names_at_ours():
    from ray.rllib.utils.from_config import from_config
    from ray.rllib.utils.replay_buffers import ReplayBuffer

    import replaybuf.rllib

    config = {"type": "PrioritizedEpisodeReplayBuffer", "capacity": 64, "alpha": 0.6, "beta": 0.4}
    assert type(from_config(ReplayBuffer, dict(config))) is StockPrioritized
    replaybuf.rllib.install()
    try:
        built = from_config(ReplayBuffer, dict(config))
        assert type(built) is PrioritizedEpisodeReplayBuffer and built.capacity == 64
        assert type(from_config(ReplayBuffer, {"type": "EpisodeReplayBuffer"})) is EpisodeReplayBuffer
    finally:
        replaybuf.rllib.uninstall()
    assert type(from_config(ReplayBuffer, dict(config))) is StockPrioritized
    dotted = {**config, "type": "replaybuf.rllib.PrioritizedEpisodeReplayBuffer"}  # DQN's spelling
    assert type(from_config(ReplayBuffer, dotted)) is PrioritizedEpisodeReplayBuffer
    assert isinstance(from_config(ReplayBuffer, dotted), StockPrioritized)
