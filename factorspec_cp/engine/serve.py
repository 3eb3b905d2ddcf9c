"""``factorspec serve``: an OpenAI-compatible vLLM server with factorspec's masks and certain-run drafts.

It runs ``vllm serve`` with the scheduler and speculative method of :mod:`factorspec_cp.engine.vllm` (the plugin
itself loads by entry point in any vLLM process of an environment where factorspec is installed), after printing
the equivalent plain ``vllm serve ...`` command line, which works on its own too.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

__all__ = ["serve", "vllm_command", "server_env", "Server"]


def server_env(*, ngram: str | None = None) -> dict[str, str]:
    """The environment ``vllm serve`` needs here: offline, a 1 GiB CPU KV cache unless set, n-gram drafts for plain
    requests when asked."""
    env = {"HF_HUB_OFFLINE": "1"}
    if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    if ngram:
        lo, _, hi = ngram.partition(":")
        if not lo.isdigit() or (hi and not hi.isdigit()) or int(lo) < 1 or int(hi or lo) < int(lo):
            raise ValueError(f"--ngram takes MIN:MAX with 1 <= MIN <= MAX, not {ngram!r}")
        env["FACTORSPEC_VLLM_NGRAM"] = f"{lo}:{hi or lo}"
    return env


def vllm_command(model: str, *, host: str = "127.0.0.1", port: int = 8000, num_speculative_tokens: int = 32,
                 max_model_len: int = 4096, extra: list[str] | None = None, executable: str = "vllm") -> list[str]:
    """The ``vllm serve`` argv with factorspec's drafts configured (masks come from the plugin)."""
    from .vllm import server_args

    cmd = [executable, "serve", model, "--host", host, "--port", str(port), "--max-model-len", str(max_model_len),
           "--enforce-eager", "--dtype", "float32"]
    if num_speculative_tokens > 0:
        cmd += server_args(num_speculative_tokens=num_speculative_tokens)
    return cmd + list(extra or [])


def serve(args: Any) -> int:
    """Print the plain command line, then run it (replacing this process)."""
    if args.model is None:
        from .model import smollm2_folder

        args.model = str(smollm2_folder())
    if not Path(args.model).is_dir():
        raise FileNotFoundError(f"--model {args.model}: not a folder")
    extra = [a for a in (args.extra or []) if a != "--"]
    if getattr(args, "engine", "vllm") == "sglang":
        return _serve_sglang(args, extra)
    env = server_env(ngram=args.ngram)
    env.update(_workers_env(args))
    cmd = vllm_command(args.model, host=args.host, port=args.port, num_speculative_tokens=args.num_speculative_tokens,
                       max_model_len=args.max_model_len, extra=extra)
    plain = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join(cmd)
    print(f"factorspec serve: the same server as a plain command line:\n  {plain}", file=sys.stderr, flush=True)
    if args.dry_run:
        print(plain)
        return 0
    exe = Path(sys.executable).with_name("vllm")
    exe_path = str(exe) if exe.is_file() else shutil.which("vllm")
    if exe_path is None:
        raise FileNotFoundError("no `vllm` command in this environment: make one with scripts/setup-vllm.sh")
    os.execve(exe_path, [exe_path, *cmd[1:]], {**os.environ, **env})
    return 0  # pragma: no cover - execve does not return


def _workers_env(args: Any) -> dict[str, str]:
    """``--constraint-workers N`` and ``--draft-wait MS`` as the environment the server's processes read
    (``FACTORSPEC_CONSTRAINT_WORKERS``, ``FACTORSPEC_DRAFT_WAIT_MS``)."""
    from .service import DRAFT_WAIT_ENV, WORKERS_ENV

    env = {}
    n = getattr(args, "constraint_workers", None)
    if n is not None:
        if n < 0:
            raise ValueError(f"--constraint-workers {n}: 0 (in-process) or more")
        env[WORKERS_ENV] = str(n)
    wait = getattr(args, "draft_wait", None)
    if wait is not None:
        if not wait >= 0:
            raise ValueError(f"--draft-wait {wait}: milliseconds (0 or more)")
        if not n:
            raise ValueError("--draft-wait applies to constraint workers: give --constraint-workers N too")
        env[DRAFT_WAIT_ENV] = f"{wait:g}"
    return env


def _serve_sglang(args: Any, extra: list[str]) -> int:
    """``--engine sglang``: SGLang's launcher with factorspec's grammar backend and n-gram draft rows (the plugin
    loads by entry point in SGLang's processes). For a machine with a GPU: not run end to end on this project's
    machines, whose CPUs SGLang's server does not support (README)."""
    from importlib.util import find_spec

    from .sglang import launch_command

    if args.ngram:
        raise ValueError("--ngram sets vLLM's prompt lookup; SGLang's NGRAM algorithm drafts every request from its "
                         "own corpus (pass its --speculative-ngram-* options after --)")
    port = args.port if args.port != 8000 else 30000  # SGLang's own default port unless one is given
    # the draft width counts the committed token at the root of the row: the certain-run cap plus one
    cmd = launch_command(args.model, host=args.host, port=port,
                         num_draft_tokens=args.num_speculative_tokens + 1 if args.num_speculative_tokens > 0 else 0,
                         extra=["--context-length", str(args.max_model_len), *extra], python=sys.executable)
    env = _workers_env(args)
    plain = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + (" " if env else "") + \
        shlex.join(["python", *cmd[1:]])
    print(f"factorspec serve: the SGLang server as a plain command line (needs a GPU):\n  {plain}", file=sys.stderr,
          flush=True)
    if args.dry_run:
        print(plain)
        return 0
    if find_spec("sglang") is None:
        raise FileNotFoundError("SGLang is not installed in this environment: install sglang (0.5.16 to 0.5.23) on "
                                "a machine with a GPU, with factorspec-cp beside it")
    os.execve(sys.executable, cmd, {**os.environ, **env})
    return 0  # pragma: no cover - execv does not return


# ------------------------------------------------------------------------------------------------- a local server
class Server:
    """A ``factorspec serve`` (vLLM) process on loopback, for tests and ``factorspec bench serve``: started in its
    own process group, ready once ``/health`` answers, stopped (the whole group) on exit.

    ``args`` are more ``factorspec serve`` arguments; ``env`` more environment (e.g. ``FACTORSPEC_VLLM_STATS``).
    """

    def __init__(self, *, model: str | None = None, port: int | None = None, args: list[str] | None = None,
                 env: dict[str, str] | None = None, log: str | None = None, timeout: float = 600.0):
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = model
        self.args, self.env, self.timeout = list(args or []), dict(env or {}), timeout
        self.log_path = log
        self.proc: Any = None
        self.served_model: str | None = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        import subprocess
        import tempfile
        import time
        import urllib.request

        cmd = [sys.executable, "-m", "factorspec_cp.cli", "serve", "--port", str(self.port), *self.args]
        if self.model:
            cmd += ["--model", self.model]
        if self.log_path is None:
            self.log_path = tempfile.mktemp(prefix="factorspec-serve-", suffix=".log")
        self._log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, **self.env}, start_new_session=True)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/v1/models", timeout=5) as r:
                    self.served_model = json.loads(r.read())["data"][0]["id"]
                    return
            except OSError:
                time.sleep(1.0)
        self.stop()
        raise TimeoutError(f"the server did not answer within {self.timeout:.0f} s: {self.tail()}")

    def tail(self, n: int = 3000) -> str:
        try:
            return Path(self.log_path or "").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        import signal
        import subprocess

        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=30)
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None

    # -- the OpenAI API -------------------------------------------------------------------------------------------
    def post(self, path: str, body: dict[str, Any], *, timeout: float = 600.0) -> tuple[int, dict[str, Any]]:
        """POST JSON; returns (HTTP status, parsed body), errors included."""
        import urllib.error
        import urllib.request

        req = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, {"error": {"message": text.decode(errors="replace")}}

    def chat(self, prompt: str, *, schema: dict[str, Any] | None = None, system: str | None = None,
             max_tokens: int = 600, xargs: dict[str, Any] | None = None, **extra: Any) -> tuple[int, dict[str, Any]]:
        """One greedy chat completion; ``schema`` goes in ``response_format`` as a json_schema (a declaration when
        it carries ``x-factorspec``); ``xargs`` become ``vllm_xargs`` (e.g. ``{"factorspec_drafts": False}``)."""
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        body: dict[str, Any] = {"model": self.served_model, "messages": messages, "temperature": 0,
                                "max_tokens": max_tokens, **extra}
        if schema is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "record", "schema": schema}}
        if xargs:
            body["vllm_xargs"] = xargs
        return self.post("/v1/chat/completions", body)

    def metrics(self) -> dict[str, float]:
        """vLLM's Prometheus counters and gauges, summed over label sets (``name`` -> value)."""
        import urllib.request

        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, _, value = line.rpartition(" ")
            name = name_labels.split("{", 1)[0]
            try:
                out[name] = out.get(name, 0.0) + float(value)
            except ValueError:
                continue
        return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
