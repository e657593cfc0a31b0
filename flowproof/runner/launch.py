"""The console scripts ``flowproof-run`` and ``flowproof``: the proxy first, then the CLI.

A replayed flow waits for mitmdump to start (1.5-2 s: mitmproxy's imports and the
addon's), and before it could start the runner imported its own modules and read the
spec and the cassette (0.7-1 s more, python -X importtime). So the entry point starts
the proxy a run will most likely need before importing anything else
(`flowproof.runner.spawn.prestart`), and mitmdump boots while the runner does that work;
the flow's session then opens on it once its ``ready`` event is in its log, as on any
proxy. Only this module and `flowproof.runner.spawn` (the standard library's cheapest
modules) are imported before the proxy is started.

The guess is a replay proxy of the default CA folder: what a run without ``--record``,
``--compare`` or ``--record-missing`` asks for. A run that turns out to need another
kind kills the guess and starts its own (docs/performance.md). Nothing is started for
``--help``, for another ``flowproof`` command, or before the CA exists (mitmdump would
create one of its own while `flowproof.runner.env.ensure_ca` creates it).

A finished command leaves without the interpreter's teardown (`leave`): the exit
handlers run and the standard streams are flushed, but the modules and their objects
are not freed one by one, which took 25-35 ms of every run after its report was out.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

from flowproof.runner.spawn import CA_BASENAME, ca_dir, prestart

TYPE_CHECKING = False  # typing's constant, without importing typing (mypy reads the name)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

__all__ = ["early_kind", "leave", "main", "run_main"]

#: Flags after which the run is not (only) a replay, or runs nothing: no guess is made.
_NOT_A_REPLAY = frozenset({"--record", "--compare", "--record-missing", "-h", "--help"})


def early_kind(args: Sequence[str], environ: Mapping[str, str]) -> tuple[str, bool, str | None] | None:
    """The kind of proxy ``flowproof-run ARGS`` will ask for first, as
    `flowproof.runner.spawn.spawn` takes it (`flowproof.runner.proxy.ProxyKind.key`), when
    it can be told from the arguments alone; None when no proxy should be started early."""
    if not args or any(a in _NOT_A_REPLAY for a in args):
        return None
    confdir = ca_dir(environ)
    if not os.path.isfile(os.path.join(confdir, f"{CA_BASENAME}-ca.pem")):
        return None
    # The kind `ProxyPool.kind` gives a replay flow of the command line's pool.
    return confdir, True, environ.get("FLOWPROOF_ADDON_SCRIPT") or None


def _start_early(args: Sequence[str]) -> None:
    # With FLOWPROOF_WARM_PROXY=0 too: the first flow's pool of one takes it.
    kind = early_kind(args, os.environ)
    if kind is not None:
        prestart(*kind)


def leave(status: object) -> NoReturn:
    """End the process with ``status`` (a `SystemExit` code) as the interpreter would, minus
    its teardown: the `atexit` handlers run (the logging handlers' flush, the scratch
    folders' removal, the early proxy's kill), then the standard streams are flushed.

    While a thread other than this one still runs and is not a daemon, the interpreter
    would wait for it: then this is a plain `sys.exit`, which does."""
    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(status)  # type: ignore[arg-type]
    if status is None:
        code = 0
    elif isinstance(status, int):
        code = status
    else:  # what sys.exit does with any other value: print it, exit 1
        print(status, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more reaches it anyway
            pass
    os._exit(code & 0xFF)


def run_main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of ``flowproof-run``."""
    _start_early(sys.argv[1:] if argv is None else argv)
    from flowproof.runner import cli  # after the proxy's start: see the module's docstring

    try:
        cli.run_main(argv)
    except SystemExit as done:
        leave(done.code)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Entry point of ``flowproof``."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["run"]:
        _start_early(args[1:])
    from flowproof.runner import cli  # see run_main

    try:
        cli.main(argv)
    except SystemExit as done:
        leave(done.code)
