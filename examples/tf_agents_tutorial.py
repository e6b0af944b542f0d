"""The TF-Agents replay-buffer tutorial's training flow, with replaybuf in TensorFlow.

    python examples/tf_agents_tutorial.py

As in the tutorial: an environment and a Q-network, a TFUniformReplayBuffer whose
data_spec is the agent's collect_data_spec, a driver with ``observers=[rb.add_batch]``
that collects with the collect policy, then training on ``as_dataset(sample_batch_size=4,
num_steps=2)``. TF-Agents' DqnAgent is replaced by a small Keras Q-network and a DQN
train step written out below; the buffer, driver and dataset code is the tutorial's.
"""

import gymnasium as gym
import numpy as np
import tensorflow as tf

from replaybuf.drivers import StepDriver
from replaybuf.tf import TFUniformReplayBuffer
from replaybuf.trajectory import StepType, collect_data_spec

tf.random.set_seed(0)
rng = np.random.default_rng(0)

# The environment (the tutorial loads CartPole with suite_gym) and a Q-network.
env = gym.make("CartPole-v1")
num_actions = int(env.action_space.n)
q_net = tf.keras.Sequential(
    [
        tf.keras.Input((4,)),
        tf.keras.layers.Dense(100, activation="relu"),
        tf.keras.layers.Dense(num_actions),
    ]
)
target_q_net = tf.keras.models.clone_model(q_net)
target_q_net.set_weights(q_net.get_weights())
optimizer = tf.keras.optimizers.Adam(0.001)
collect_data_spec = collect_data_spec(env)  # what TF-Agents calls agent.collect_data_spec


def collect_policy(observation, epsilon=0.1):
    """Epsilon-greedy over the Q-network, for a batch of observations."""
    greedy = tf.argmax(q_net(observation), axis=1).numpy()
    explore = rng.random(len(observation)) < epsilon
    return np.where(explore, rng.integers(0, num_actions, len(observation)), greedy)


@tf.function
def train(experience, gamma=0.99):
    """One DQN step on 2-step windows; windows starting at a boundary are masked."""
    observation = experience.observation
    action = tf.cast(experience.action[:, 0], tf.int32)
    next_q = tf.reduce_max(target_q_net(observation[:, 1]), axis=1)
    target = experience.reward[:, 0] + gamma * experience.discount[:, 0] * next_q
    valid = tf.cast(experience.step_type[:, 0] != StepType.LAST, tf.float32)
    with tf.GradientTape() as tape:
        q = tf.gather(q_net(observation[:, 0]), action, batch_dims=1)
        loss = tf.reduce_sum(tf.keras.losses.huber(target[:, None], q[:, None]) * valid)
        loss /= tf.maximum(tf.reduce_sum(valid), 1.0)
    optimizer.apply_gradients(
        zip(tape.gradient(loss, q_net.trainable_variables), q_net.trainable_variables, strict=True)
    )
    return loss


replay_buffer_capacity = 1000
replay_buffer = TFUniformReplayBuffer(collect_data_spec, batch_size=1, max_length=replay_buffer_capacity)

# Add an observer that adds to the replay buffer:
replay_observer = [replay_buffer.add_batch]

collect_steps_per_iteration = 10
driver = StepDriver(env, collect_policy, observers=replay_observer, num_steps=collect_steps_per_iteration, seed=0)
for _ in range(10):
    driver.run()
print("frames in the buffer:", int(replay_buffer.num_frames()))

# Read the replay buffer as a Dataset,
# read batches of 4 elements, each with 2 timesteps:
dataset = replay_buffer.as_dataset(sample_batch_size=4, num_steps=2)
iterator = iter(dataset)

num_train_steps = 10
for step in range(num_train_steps):
    driver.run()
    trajectories, info = next(iterator)
    loss = train(trajectories)
    print(f"train step {step}: loss {float(loss):.4f}")

print("trajectory shapes:", tf.nest.map_structure(lambda t: tuple(t.shape), trajectories))
print("ids shape:", tuple(info.ids.shape), "probabilities shape:", tuple(info.probabilities.shape))
