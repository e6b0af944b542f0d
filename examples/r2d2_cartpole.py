"""R2D2-style recurrent DQN on a partially observed CartPole-v1, in one file, top to bottom.

    python examples/r2d2_cartpole.py                  # LSTM (stops at a greedy return >= 490 or --cpu-limit)
    python examples/r2d2_cartpole.py --feedforward    # the same learner with an MLP: no memory
    python examples/r2d2_cartpole.py --total-steps 4000 --learning-starts 1000  # a quick smoke run

The agent sees the cart position and the pole angle only (the two velocities are removed):
a POMDP that a policy without memory cannot solve. Several CartPoles are stepped with an
LSTM Q-network (Ape-X's per-env epsilon floors); every step adds one item per env to a
``PrioritizedReplayBuffer(respect_episodes=True, pad_episode_ends=True)``: the observation,
the action, the reward, the two end flags and ``h``, ``c`` (the actor's recurrent state
*before* the observation: stored state, R2D2). Gymnasium's vector envs reset on the step
after an episode ends, so the item after the end holds the final observation (``last``:
the episode's boundary item, whose action is never applied; ``episode_end_field="last"``).

Training reads ``get_next(batch_size, num_steps=T + 1, burn_in=B, period=T // 2)``: each
sequence starts its unroll from the stored state of its first real step, warms it up over
the B burn-in steps (no gradient; clamped at the episode start), then learns on T steps
(the extra step gives the last one a bootstrap) with n-step double-Q targets from a target
network unrolled alike. The new priority of a sequence is R2D2's ``0.9 max + 0.1 mean`` of
its |TD errors| (``replaybuf.nstep.sequence_priority``), set at its learning start
``info.ids[:, B]``.
"""

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from replaybuf import ArraySpec, PrioritizedReplayBuffer
from replaybuf.nstep import n_step, sequence_priority

parser = argparse.ArgumentParser()
parser.add_argument("--feedforward", action="store_true", help="an MLP on the same observation (no memory)")
parser.add_argument("--total-steps", type=int, default=400_000, help="env steps (all envs)")
parser.add_argument(
    "--cpu-limit", type=float, default=600.0, help="CPU seconds of this (single-threaded) process at most"
)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--num-envs", type=int, default=8)
parser.add_argument("--hidden", type=int, default=64)
parser.add_argument("--learning-rate", type=float, default=1e-3)
parser.add_argument("--batch-size", type=int, default=32, help="sequences per update")
parser.add_argument("--seq-len", type=int, default=20, help="learning steps per sequence (T)")
parser.add_argument("--burn-in", type=int, default=10)
parser.add_argument("--n-step", type=int, default=3)
parser.add_argument("--gamma", type=float, default=0.99)
parser.add_argument("--eta", type=float, default=0.9, help="priority: eta * max + (1 - eta) * mean |td|")
parser.add_argument("--learning-starts", type=int, default=5_000, help="env steps before the first update")
parser.add_argument("--train-every", type=int, default=1, help="batched env steps per update")
parser.add_argument("--target-every", type=int, default=250, help="updates between target network copies")
parser.add_argument("--exploration-steps", type=int, default=20_000, help="env steps of the epsilon decay")
parser.add_argument("--eval-every", type=int, default=10_000, help="env steps between greedy evaluations")
args = parser.parse_args()

torch.manual_seed(args.seed)
torch.set_num_threads(1)
rng = np.random.default_rng(args.seed)
KEEP = [0, 2]  # cart position and pole angle; the velocities (1 and 3) are hidden


class QNet(nn.Module):
    """Observations ``[N, L, 2]`` -> Q-values ``[N, L, 2]``, threading a recurrent state
    ``(h, c)`` (each ``[N, hidden]``; the feed-forward variant passes it through untouched).
    With ``lengths``, only each row's first ``lengths`` steps move its state."""

    def __init__(self, hidden: int, recurrent: bool):
        super().__init__()
        self.encode = nn.Sequential(nn.Linear(len(KEEP), hidden), nn.ReLU())
        self.core = (
            nn.LSTM(hidden, hidden, batch_first=True)
            if recurrent
            else nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())
        )
        self.head = nn.Linear(hidden, 2)

    def forward(self, observation, state, lengths=None):
        x = self.encode(observation)
        if not isinstance(self.core, nn.LSTM):
            return self.head(self.core(x)), state
        state = (state[0][None], state[1][None])
        if lengths is None:
            x, (h, c) = self.core(x, state)
            return self.head(x), (h[0], c[0])
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths.clamp(min=1), batch_first=True, enforce_sorted=False)
        _, (h, c) = self.core(packed, state)
        moved = (lengths > 0)[:, None]  # rows without a step keep their state
        return None, (torch.where(moved, h[0], state[0][0]), torch.where(moved, c[0], state[1][0]))


def warm_up(net, observation, mask, state):
    """The state after the burn-in (the first B steps of ``[N, B + ...]`` sequences) from
    the stored state of each row's first real step: the burn-in's real steps are its last
    ones (it is clamped at the episode start), moved to the front for the packed LSTM."""
    if B == 0:
        return state
    padding = B - mask[:, :B].sum(1)
    index = torch.clamp(torch.arange(B)[None] + padding[:, None], max=B)
    steps = observation.gather(1, index[..., None].expand(-1, -1, observation.shape[-1]))
    return net(steps, state, lengths=B - padding)[1]


def zeros(n):
    return torch.zeros(n, args.hidden), torch.zeros(n, args.hidden)


def evaluate(net, episodes=20, seed=0):
    env = gym.make_vec("CartPole-v1", num_envs=episodes, vectorization_mode="sync")
    observation, _ = env.reset(seed=seed)
    returns, done, state = np.zeros(episodes), np.zeros(episodes, bool), zeros(episodes)
    while not done.all():
        with torch.no_grad():
            q, state = net(torch.as_tensor(observation[:, KEEP])[:, None], state)
        observation, reward, terminated, truncated, _ = env.step(q[:, 0].argmax(1).numpy())
        returns += np.where(done, 0.0, reward)
        done |= terminated | truncated
    return returns.mean()


# -- environment, buffer, networks ------------------------------------------------------
E, B, T = args.num_envs, args.burn_in, args.seq_len
envs = gym.make_vec("CartPole-v1", num_envs=E, vectorization_mode="sync")
spec = {
    "observation": ArraySpec((len(KEEP),), np.float32),
    "action": ArraySpec((), np.int64),
    "reward": ArraySpec((), np.float32),
    "terminated": ArraySpec((), np.bool_),
    "truncated": ArraySpec((), np.bool_),
    "last": ArraySpec((), np.bool_),  # the final observation: the episode ends after this item
    "h": ArraySpec((args.hidden,), np.float32),  # the actor's state before this observation
    "c": ArraySpec((args.hidden,), np.float32),
}
rb = PrioritizedReplayBuffer(
    spec,
    batch_size=E,
    max_length=100_000 // E,
    alpha=0.9,
    beta=0.6,
    respect_episodes=True,
    pad_episode_ends=True,
    episode_end_field="last",
    seed=args.seed,
)
q_net, target_net = QNet(args.hidden, not args.feedforward), QNet(args.hidden, not args.feedforward)
target_net.load_state_dict(q_net.state_dict())
optimizer = torch.optim.Adam(q_net.parameters(), lr=args.learning_rate)
floors = 0.4 ** (1 + 7 * np.arange(E) / max(1, E - 1))  # Ape-X's per-actor epsilons


def learn():
    """One update on a batch of sequences; returns the loss, the new priorities and the mean Q taken."""
    items, info = rb.get_next(sample_batch_size=args.batch_size, num_steps=T + 1, burn_in=B, period=max(1, T // 2))
    obs, mask = torch.as_tensor(items["observation"]), torch.as_tensor(info.mask)
    state = (torch.as_tensor(items["h"][:, 0]), torch.as_tensor(items["c"][:, 0]))  # the first real step's
    # n-step returns over the first L - 1 steps, so that every bootstrap step lies in the sequence
    ret = n_step(
        items["reward"][:, :-1],
        items["terminated"][:, :-1],
        items["truncated"][:, :-1],
        gamma=args.gamma,
        n=args.n_step,
        mask=info.mask[:, :-1],
    )
    boot = ret.last + 1
    valid = (  # learning steps with an action (not the boundary item) and a real bootstrap step
        info.learn[:, :-1] & ~items["last"][:, :-1] & ((ret.discounts == 0) | np.take_along_axis(info.mask, boot, 1))
    )[:, B:]
    with torch.no_grad():  # burn-in: warm the stored state up, no gradient
        q_target, _ = target_net(obs[:, B:], warm_up(target_net, obs, mask, state))  # [N, T + 1, 2]
        warm = warm_up(q_net, obs, mask, state)
    q_online, _ = q_net(obs[:, B:], warm)  # padding past a real run is never used
    with torch.no_grad():  # double Q: the online network picks at the bootstrap step, the target values
        boot_t = torch.as_tensor(boot[:, B:])
        pick = q_online.gather(1, (boot_t - B)[..., None].expand(-1, -1, 2)).argmax(-1, keepdim=True)
        value = q_target.gather(1, (boot_t - B)[..., None].expand(-1, -1, 2)).gather(2, pick).squeeze(-1)
        target = (
            torch.as_tensor(ret.returns[:, B:], dtype=torch.float32)
            + torch.as_tensor(ret.discounts[:, B:], dtype=torch.float32) * value
        )
    taken = q_online[:, :T].gather(2, torch.as_tensor(items["action"][:, B:-1])[..., None]).squeeze(-1)
    # importance weights normalised by the batch's largest (the buffer's are by the smallest
    # probability stored, which the near-zero priorities of sequences without a target make tiny)
    weight = torch.as_tensor(info.weights / info.weights.max(), dtype=torch.float32)[:, None] * torch.as_tensor(valid)
    loss = (nn.functional.smooth_l1_loss(taken, target, reduction="none") * weight).sum() / max(1, valid.sum())
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(q_net.parameters(), 10.0)
    optimizer.step()
    td = np.zeros(info.learn[:, :-1].shape, np.float32)
    td[:, B:] = (taken - target).abs().detach().numpy() * valid  # steps without a target count as 0
    priority = sequence_priority(td, info.learn[:, :-1], eta=args.eta) + 1e-3  # > 0: every sequence stays drawable
    rb.update_priorities(info.ids[:, B], priority)
    return loss.item(), priority, taken.detach().mean().item()


# -- collect and train ------------------------------------------------------------------
observation, _ = envs.reset(seed=args.seed)
state, last = zeros(E), np.zeros(E, bool)
episode_return, returns = np.zeros(E), []
steps, updates, next_eval, best, best_weights = 0, 0, args.eval_every, -1.0, None
loss_value, priority, mean_q = float("nan"), np.full(1, np.nan), float("nan")
start, cpu_start = time.time(), time.process_time()
while steps < args.total_steps and time.process_time() - cpu_start < args.cpu_limit:
    partial = torch.as_tensor(observation[:, KEEP])
    with torch.no_grad():
        q, new_state = q_net(partial[:, None], state)
    epsilon = np.maximum(floors, 1.0 - steps / args.exploration_steps)
    action = np.where(rng.random(E) < epsilon, rng.integers(0, 2, E), q[:, 0].argmax(1).numpy())
    observation, reward, terminated, truncated, _ = envs.step(action)
    rb.add_batch(
        {
            "observation": partial.numpy(),
            "action": action,
            "reward": reward.astype(np.float32),
            "terminated": terminated,
            "truncated": truncated,
            "last": last,
            "h": state[0].numpy(),
            "c": state[1].numpy(),
        }
    )
    episode_return += reward
    returns.extend(episode_return[terminated | truncated])
    episode_return[terminated | truncated] = 0.0
    # after a boundary item the env has reset: the next episode starts from a zero state
    reset = torch.as_tensor(last)[:, None]
    state = (new_state[0].masked_fill(reset, 0.0), new_state[1].masked_fill(reset, 0.0))
    last = terminated | truncated
    steps += E
    if steps >= args.learning_starts and (steps // E) % args.train_every == 0:
        loss_value, priority, mean_q = learn()
        updates += 1
        if updates % args.target_every == 0:
            target_net.load_state_dict(q_net.state_dict())
    if steps >= next_eval:
        next_eval += args.eval_every
        score = evaluate(q_net, seed=10_000 + steps)
        print(
            f"step {steps}: updates {updates}, loss {loss_value:.4f}, mean Q {mean_q:.1f}, "
            f"training return {np.mean(returns[-20:]):.1f}, greedy return {score:.1f}, "
            f"priorities {priority.min():.3f}..{priority.max():.3f}, "
            f"{time.time() - start:.0f} s wall, {time.process_time() - cpu_start:.0f} s CPU",
            flush=True,
        )
        if score > best:
            best, best_weights = score, {k: v.clone() for k, v in q_net.state_dict().items()}
        if best >= 490:
            break

if best_weights is not None:
    q_net.load_state_dict(best_weights)
kind = "feed-forward" if args.feedforward else "LSTM"
print(
    f"{kind}: env steps {steps}, updates {updates}, wall time {time.time() - start:.1f} s, "
    f"CPU time {time.process_time() - cpu_start:.1f} s, final loss {loss_value:.4f}"
)
print(f"mean greedy return over 20 fresh episodes: {evaluate(q_net, seed=1_000_000 + args.seed):.1f}", flush=True)
