"""What a long-running command (mirror, monitor, canary, run) checks of its config before it asks any cluster
anything: each problem exits 2 naming the key, as a config error does."""

from __future__ import annotations

import tempfile
from pathlib import Path

from kernel.config import MirrorwatchConfig, load_config
from kernel.errors import ConfigError, ConfigProblem
from kernel.web_config import load_web_config

__all__ = ["serving_config", "writable_state_dir"]


def serving_config(path: Path, *, writes_state: bool = True) -> MirrorwatchConfig:
    """The config of a command that serves the HTTP API, its http.web_config_file read and checked now (exit 2
    before any cluster is asked anything), and its state_dir writable when it writes there."""
    cfg = load_config(path)
    if cfg.http.web_config_file is not None:
        load_web_config(cfg.http.web_config_file)
    if writes_state:
        writable_state_dir(cfg, str(path))
    return cfg


def writable_state_dir(config: MirrorwatchConfig, source: str | None) -> None:
    """Workers and the canary write their status and a link's local notes under state_dir: one they cannot write
    (a read-only root filesystem in a container, another user's directory) is said at once, exit 2, naming it."""
    where = config.state_path
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, prefix=".writable-"):
            pass
    except OSError as exc:
        problem = f"{where} is not a directory this process can write ({exc.strerror or exc})"
        raise ConfigError([ConfigProblem("state_dir", problem)], source) from None
