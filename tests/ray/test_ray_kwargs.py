"""k8sddp.ray.trainer_kwargs and the worker-side env check (no Ray cluster needed)."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytest.importorskip("ray.train.torch")

from k8sddp import guardvars as gv  # noqa: E402
from k8sddp.errors import UsageError  # noqa: E402
from k8sddp.ray import _problems, trainer_kwargs  # noqa: E402


def test_defaults_are_the_shared_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gv.RAY_COLLECTIVE_TIMEOUT, raising=False)
    kwargs = trainer_kwargs({}, storage_path="/tmp/x")
    assert kwargs["torch_config"].timeout_s == gv.DEFAULT_PG_TIMEOUT_SECONDS == gv.RAY_TORCH_CONFIG_TIMEOUT_SECONDS
    assert kwargs["run_config"].failure_config.max_failures == max(gv.MIN_RAY_MAX_FAILURES, gv.DEFAULT_MAX_HANG_RESTARTS)
    assert os.environ[gv.RAY_COLLECTIVE_TIMEOUT] == str(gv.DEFAULT_RAY_COLLECTIVE_TIMEOUT_SECONDS)


def test_values_come_from_the_k8sddp_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gv.RAY_COLLECTIVE_TIMEOUT, "77")
    kwargs = trainer_kwargs({gv.PG_TIMEOUT: "600", gv.MAX_HANG_RESTARTS: "0", gv.ARTIFACT_DIR: "/ckpt/k8sddp"}, backend="gloo")
    assert kwargs["torch_config"].timeout_s == 600 and kwargs["torch_config"].backend == "gloo"
    assert kwargs["run_config"].failure_config.max_failures == gv.MIN_RAY_MAX_FAILURES  # never 0: a hang must be restarted
    assert kwargs["run_config"].storage_path == "/ckpt/k8sddp/ray"
    assert os.environ[gv.RAY_COLLECTIVE_TIMEOUT] == "77"  # an explicit value is kept
    with pytest.raises(UsageError, match=gv.PG_TIMEOUT):
        trainer_kwargs({gv.PG_TIMEOUT: "soon"})


def test_worker_env_check_refuses_values_the_contract_does_not_accept() -> None:
    good = dict(gv.guard_env(torch_version=None, artifact_dir="/ckpt/k8sddp"))
    assert _problems(good) == []
    for bad in ("0", "2", ""):
        assert any(gv.ASYNC_ERROR_HANDLING in p for p in _problems({**good, gv.ASYNC_ERROR_HANDLING: bad}))
    assert any(gv.FAULTHANDLER in p for p in _problems({k: v for k, v in good.items() if k != gv.FAULTHANDLER}))


def test_a_guarded_loop_of_the_driver_script_pickles_for_ray() -> None:
    """The README's usage: ``@k8sddp.ray.guard`` on a loop defined in the driver script
    (``__main__``). Ray's cloudpickle pickles such a loop by value; the guard's wrapper must not
    drag this module's lock and state along (``fit()`` failed: cannot pickle '_thread.lock')."""
    import inspect

    import ray.cloudpickle as cloudpickle

    from k8sddp import ray as kray

    def train_loop(config: dict[str, int]) -> int:
        return config["x"] + 1

    train_loop.__module__ = "__main__"
    guarded = kray.guard(train_loop)
    back = cloudpickle.loads(cloudpickle.dumps(guarded))
    assert list(inspect.signature(back).parameters) == ["config"]  # Ray passes the config by it
    assert back.__name__ == "train_loop"
    assert back.__wrapped__({"x": 1}) == 2


def test_guard_refuses_what_is_not_callable_at_once() -> None:
    from k8sddp import ray as kray

    with pytest.raises(TypeError, match="must be callable, not int"):
        kray.guard(5)  # type: ignore[type-var]


class _Ctx:
    """What ``_start`` reads of ``ray.train.get_context()`` (no Ray worker in this test)."""

    def get_world_rank(self) -> int:
        return 0

    get_local_rank = get_node_rank = get_world_rank

    def get_world_size(self) -> int:
        return 1

    def get_experiment_name(self) -> str:
        return "exp"


def _env(tmp: Any, artifact_dir: str, fr: str) -> dict[str, str]:
    env = dict(gv.guard_env(torch_version=None, artifact_dir=artifact_dir))
    env[gv.FR_DUMP_TEMP_FILE] = fr
    return env


def test_an_unwritable_artifact_dir_is_named_in_the_worker(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """As under ``k8sddp launch``: the variable and why, not a bare NotADirectoryError from mkdir;
    and the flight recorder's own folder is created (NCCL's dump does not create it)."""
    import ray.train

    from k8sddp import ray as kray

    monkeypatch.setattr(ray.train, "get_context", lambda: _Ctx())
    (tmp_path / "afile").write_text("")
    with pytest.raises(kray.GuardEnvError, match=f"{gv.ARTIFACT_DIR}=.*afile.*cannot write there"):
        kray._start(_env(tmp_path, str(tmp_path / "afile" / "k8sddp"), str(tmp_path / "fr" / "rank-")))
    with pytest.raises(kray.GuardEnvError, match=f"{gv.FR_DUMP_TEMP_FILE}=.*cannot create its folder"):
        kray._start(_env(tmp_path, str(tmp_path / "ok"), str(tmp_path / "afile" / "fr" / "rank-")))
    monkeypatch.setattr(kray, "_hook", lambda *a: None)  # no torch hooks in the test process
    g = kray._start(_env(tmp_path, str(tmp_path / "ok"), str(tmp_path / "fr" / "rank-")))
    g.stop()
    assert (tmp_path / "fr").is_dir()


def test_a_fractional_pg_timeout_is_rounded_up_not_to_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gv.RAY_COLLECTIVE_TIMEOUT, "77")
    assert trainer_kwargs({gv.PG_TIMEOUT: "0.5"})["torch_config"].timeout_s == 1  # int() gave 0
    assert trainer_kwargs({gv.PG_TIMEOUT: "600.2"})["torch_config"].timeout_s == 601
