"""A stop for learning tests: ``train(cfg, callbacks=[RecentEpisodes(n, target)])`` ends a
run once its last ``n`` training episodes average ``target``. The run's own target reads
the 100-episode mean, whose first 100 episodes include the random start's and which, with
many envs, waits for every long episode to end."""

from __future__ import annotations

from a3c.run.callbacks import RunEvent


class RecentEpisodes:
    """A callback that stops the run once its last ``n`` training episodes (whole log
    windows of them) average ``target`` or more; ``reached_at``: the step it did."""

    def __init__(self, n: int, target: float) -> None:
        self.n, self.target = n, target
        self.windows: list[tuple[int, float]] = []  # (episodes, their sum), newest first
        self.episodes = 0
        self.reached_at: int | None = None

    def __call__(self, event: RunEvent) -> bool | None:
        if event.kind != "log":
            return None
        new, self.episodes = event.episodes - self.episodes, event.episodes
        if new:  # the window's mean return is over its episodes
            self.windows.insert(0, (new, event.stats["charts/episodic_return"] * new))
        count = total = 0.0
        for i, (episodes, returns) in enumerate(self.windows):
            count, total = count + episodes, total + returns
            if count >= self.n:
                del self.windows[i + 1 :]
                break
        else:
            return None
        if total / count < self.target:
            return None
        self.reached_at = event.env_steps
        return False
