"""``python -m MODULE ...`` and ``python SCRIPT ...`` forked from a warm interpreter.

Most of a command's test is its child importing torch (~2 s of CPU each, on a suite of 2
cores). :class:`Popen` asks a server (one per test process, this file run as a script,
torch and the packages imported once) to fork a child that becomes the command: its argv,
folder, environment, ``sys.path`` and stdio as ``subprocess`` would give them, a real
process whose pid can be signalled and whose children are its own. It runs the module
through :mod:`runpy`, as ``python -m`` does, and ends as that interpreter ends (exit code,
traceback, atexit, SIGINT). What it does not redo is the interpreter's start, so anything
that needs one (``-c``, other executables, interpreter flags, a variable read at
import such as ``OMP_NUM_THREADS``) is started the usual way. The server's reaping tells
the client each exit status; a server that cannot start means plain processes, and so
does ``WARM_PYTHON=0``.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import ctypes
import gc
import importlib.machinery
import json
import os
import runpy
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import types
import warnings
from pathlib import Path
from typing import Any, NoReturn

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
#: What the server imports before it forks: the costs a command pays at its start.
WARM_MODULES = (
    "torch", "numpy", "gymnasium", "a3c.run.cli", "a3c.run.trainer", "a3c.use.saved",
    "a3c.use.exporting", "hogwild.supervised.api", "hogwild.mnist.cli",
    "torch.utils.tensorboard", "torch.distributed.elastic.agent.server.api",
    # The extras' (minatar: 2.7 s, seaborn and pandas; onnxscript and dynamo: 2 s each).
    # Not onnxruntime: its thread pool, forked, aborts the child at exit (std::system_error).
    "minatar", "ale_py", "cv2", "minigrid", "mujoco", "pettingzoo", "optuna", "matplotlib",
    "onnxscript", "torch.onnx", "torch._dynamo",
)  # fmt: skip
#: Variables read at an interpreter's start or torch's import: a child given other
#: values than the server's gets a fresh interpreter.
READ_AT_START = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "PYTHONHASHSEED")
#: Popen's arguments that a forked child does not honour: they get a fresh interpreter.
COLD_ONLY = ("executable", "preexec_fn", "pass_fds", "shell", "user", "group", "extra_groups",
             "umask", "process_group")  # fmt: skip
STATUS_BYTES = 4096
#: Seconds the server may take to import (~3-12 s here) or to fork a child.
START_S = 120.0


# -- the client: a subprocess.Popen whose child the server forks --------------------------


class _Server:
    """The test process's server: started on first use, ended when the process ends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.path = ""
        self.environ: dict[str, str] = {}
        self.failed = False

    def address(self) -> str | None:
        with self.lock:
            if self.proc is None and not self.failed:
                self._start()
            return None if self.failed else self.path

    def _start(self) -> None:
        folder = tempfile.mkdtemp(prefix="warm-python-")
        self.path = os.path.join(folder, "socket")
        self.environ = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        ready_r, ready_w = os.pipe()
        log = Path(folder, "server.log")
        with log.open("wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, self.path, str(ready_w)],
                stdin=subprocess.PIPE,  # its EOF: this process has ended
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                pass_fds=(ready_w,),
                env=self.environ,
                cwd=folder,
            )
        os.close(ready_w)
        with os.fdopen(ready_r, "rb") as ready:
            # Past START_S (a hung import) the server is killed and children start cold.
            said = ready.read().decode() if select.select([ready], [], [], START_S)[0] else ""
        atexit.register(self.stop)
        if said != "ready":
            self.failed = True
            self.stop()
            why = said or log.read_text(errors="replace")[-2000:] or "it died"
            warnings.warn(f"no warm server, children start cold: {why}", stacklevel=3)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


_SERVER = _Server()


def server_pid() -> int | None:
    """The server's pid: a child of this process that is no test's."""
    return None if _SERVER.proc is None else _SERVER.proc.pid


def _warm_request(args: list[str], cwd: Any, env: Any) -> dict | None:
    """What the server needs to become ``args``, or None when only a fresh start will do."""
    if os.environ.get("WARM_PYTHON") == "0" or len(args) < 2 or args[0] != sys.executable:
        return None
    if args[1] == "-m" and len(args) >= 3:
        target = {"module": args[2], "argv": args[3:]}
    elif not args[1].startswith("-") and args[1].endswith(".py"):
        target = {"script": args[1], "argv": args[2:]}
    else:
        return None
    address = _SERVER.address()
    if address is None:
        return None
    env = dict(os.environ if env is None else env)
    if any(env.get(name) != _SERVER.environ.get(name) for name in READ_AT_START):
        return None
    return {**target, "cwd": os.fspath(cwd or os.getcwd()), "env": env, "address": address}


class Popen(subprocess.Popen):
    """``subprocess.Popen`` for ``[sys.executable, "-m", module, ...]`` or a script: the
    child forked from the warm server, anything else started as usual."""

    _request: dict | None = None
    _conn: socket.socket | None = None
    _buffer = b""

    def __init__(self, args: Any, *a: Any, **kw: Any) -> None:
        if not a and not any(kw.get(k) for k in COLD_ONLY):
            self._request = _warm_request(list(map(os.fspath, args)), kw.get("cwd"), kw.get("env"))
        super().__init__(args, *a, **kw)

    def _execute_child(
        self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
        creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
        restore_signals, gid, gids, uid, umask, start_new_session, *rest,
    ) -> None:  # fmt: skip
        request = self._request
        if request is None:
            return super()._execute_child(
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo,
                creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite,
                restore_signals, gid, gids, uid, umask, start_new_session, *rest,
            )  # fmt: skip
        fds = [fd if fd != -1 else i for i, fd in enumerate((p2cread, c2pwrite, errwrite))]
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(request.pop("address"))
        body = json.dumps({**request, "new_session": bool(start_new_session)}).encode()
        socket.send_fds(conn, [body], fds)
        conn.shutdown(socket.SHUT_WR)
        self._conn = conn
        conn.settimeout(START_S)  # a server that never answers is an OSError, not a hang
        reply = self._line(block=True)
        conn.settimeout(None)
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)
        if not reply or not reply.startswith(b"pid "):
            conn.close()
            raise OSError(f"the warm server did not start {args!r}: {reply!r}")
        self.pid = int(reply[4:])
        self._child_created = True

    def _line(self, block: bool) -> bytes | None:
        """The server's next message; None if none has come yet (``block`` False), b""
        once the server is gone. A fast child's status can follow its pid in one read."""
        assert self._conn is not None
        while b"\n" not in self._buffer:
            if not block and not select.select([self._conn], [], [], 0)[0]:
                return None
            data = self._conn.recv(STATUS_BYTES)
            if not data:
                return b""
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _status(self, block: bool) -> tuple[int, int]:
        """``(pid, status)`` once the server has reaped the child, else ``(0, 0)``."""
        line = self._line(block)
        if line is None:
            return 0, 0
        assert self._conn is not None
        self._conn.close()
        if not line.startswith(b"status "):  # the server is gone: say "killed"
            return self.pid, signal.SIGKILL
        return self.pid, int(line[7:])

    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        if self._conn is None:
            return super()._try_wait(wait_flags)
        if self.returncode is not None:
            return self.pid, 0
        return self._status(block=not wait_flags & os.WNOHANG)

    def _internal_poll(self, _deadstate=None, **kw: Any) -> int | None:
        if self._conn is None:
            return super()._internal_poll(_deadstate, **kw)
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    pid, sts = self._status(block=False)
                    if pid:
                        self._handle_exitstatus(sts)
            finally:
                self._waitpid_lock.release()
        return self.returncode


def run(
    args: Any, *, timeout: float | None = None, check: bool = False, **kw: Any
) -> subprocess.CompletedProcess:
    """``subprocess.run`` through :class:`Popen`."""
    if kw.pop("capture_output", False):
        kw["stdout"] = kw["stderr"] = subprocess.PIPE
    with Popen(args, **kw) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            proc.kill()
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


# -- the server -------------------------------------------------------------------------


def _serve(path: str, ready_fd: int) -> dict:
    """Fork a child per request and send each its exit status; returns only in a child,
    with what it is to become."""
    for name in WARM_MODULES:
        with contextlib.suppress(Exception):
            __import__(name)
    gc.freeze()  # a child's collections leave the server's objects (and pages) alone
    import torch

    if threading.active_count() != 1:  # OpenBLAS's threads are forked past, as the engine's
        os.write(ready_fd, b"Python threads: forking would be unsafe")
        sys.exit(1)
    if torch.cuda.is_initialized():  # a forked child could not use the GPU
        os.write(ready_fd, b"CUDA was initialised while importing")
        sys.exit(1)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    os.write(ready_fd, b"ready")
    os.close(ready_fd)
    children: dict[int, socket.socket] = {}
    while True:
        with contextlib.suppress(InterruptedError):
            readable = select.select([listener, wake_r, sys.stdin], [], [])[0]
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
            shutil.rmtree(os.path.dirname(path), ignore_errors=True)
            os._exit(0)  # the test process has ended
        if wake_r in readable:
            os.read(wake_r, 4096)
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if not pid:
                    break
                with contextlib.suppress(OSError):
                    children.pop(pid).sendall(f"status {status}\n".encode())
        if listener in readable:
            conn = listener.accept()[0]
            body, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            while part := conn.recv(1 << 20):
                body += part
            request = json.loads(body)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for sock in (listener, conn, *children.values()):
                    sock.close()
                os.close(wake_r)
                os.close(wake_w)
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                for fd in set(fds):
                    if fd > 2:
                        os.close(fd)
                return request
            for fd in fds:
                os.close(fd)
            conn.sendall(f"pid {pid}\n".encode())
            children[pid] = conn


def _become(request: dict, base_path: list[str]) -> None:
    """This forked child turns into ``python -m module`` or ``python script``."""
    if request["new_session"]:
        os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    import random

    import numpy
    import torch

    random.seed()
    numpy.random.seed()
    torch.seed()
    if "module" in request:
        sys.path[:] = [os.getcwd(), *extra, *base_path]
        sys.argv = ["-m", *request["argv"]]
        sys.modules.pop(request["module"], None)
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    else:
        script = os.path.abspath(request["script"])
        sys.path[:] = [os.path.dirname(os.path.realpath(script)), *extra, *base_path]
        sys.argv = [request["script"], *request["argv"]]
        # Not runpy.run_path, which would give sys.argv[0] the absolute path.
        main = sys.modules["__main__"] = types.ModuleType("__main__")
        loader = importlib.machinery.SourceFileLoader("__main__", script)
        main.__dict__.update(__file__=script, __loader__=loader, __builtins__=builtins)
        exec(compile(Path(script).read_bytes(), script, "exec"), main.__dict__)


def _exit(code: int, interrupted: bool) -> NoReturn:
    """End as the interpreter does (threads joined, atexit, streams flushed) but skip its
    teardown of the modules, which in a forked child copies every page the server had
    (2.4 s a child; 0.1 s without)."""
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    ctypes.CDLL(None).fflush(None)
    if interrupted:  # an uncaught KeyboardInterrupt: die of SIGINT, as Python does
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _exit_code(request: dict, base_path: list[str]) -> tuple[int, bool]:
    """Run the command; its exit code as Python's top level gives it, and whether an
    uncaught KeyboardInterrupt ended it."""
    try:
        _become(request, base_path)
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0, False
        print(stop.code, file=sys.stderr)
        return 1, False
    except BaseException as error:
        sys.excepthook(type(error), error, error.__traceback__)
        return 1, isinstance(error, KeyboardInterrupt)
    return 0, False


if __name__ == "__main__":
    # sys.path: the script's folder, PYTHONPATH's folders, then what every child shares.
    own = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = sys.path[1 + len(own) :]
    _exit(*_exit_code(_serve(sys.argv[1], int(sys.argv[2])), base))
