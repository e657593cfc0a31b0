"""The hooks of flowproof's own layers, run through mitmproxy's addons without a round trip.

A layer asks for a hook by yielding it. mitmproxy's connection handler then starts a
task for it (eager: it runs at once, every addon's handler in chain order, then
``update`` for a flow, then the wait while the flow is intercepted), and when the
task is done it feeds a ``HookCompleted`` event back down the connection's whole
layer stack. That second half costs a suspension on the handler's lock, a turn of
the event loop and a walk through every layer, even when every handler returned at
once, which in a replaying session they do: four times per replayed call.

`fire` starts the same task, the same way, and when it is done before `fire`
returns (no handler had to wait) the layer goes on at once. A task still running
(a handler waits on something: a user's hook on its worker thread, an intercepted
flow) is waited for by yielding `FlowproofRestHook`, which mitmproxy runs like any
hook; the root addon's ``flowproof_rest`` waits for the task, and the layer goes on
when it has finished, as it would have.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mitmproxy import ctx, flow
from mitmproxy.proxy import commands, layer

__all__ = ["FlowproofRestHook", "fire", "rest"]


@dataclass
class FlowproofRestHook(commands.StartHook):
    """The end of a hook `fire` started whose handlers are still running.

    The root addon's ``flowproof_rest`` waits for ``task``; a layer that yields this hook
    goes on when it has."""

    task: asyncio.Task[None]


def fire(hook: commands.StartHook) -> layer.CommandGenerator[None]:
    """Run ``hook`` through mitmproxy's addons as mitmproxy runs a hook a layer yields, and
    go on at once if nothing in it waited; else yield `FlowproofRestHook` for the rest."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        # No loop: the layer is driven by hand (mitmproxy's playbook tests), which answers
        # the hook itself.
        yield hook
        return
    task = asyncio.eager_task_factory(loop, _lifecycle(hook), name=f"handle_hook({hook.name})")
    if task.done():
        task.result()  # a handler's error is logged inside; anything else is a bug, raised here
        return
    yield FlowproofRestHook(task)


async def rest(task: asyncio.Task[None]) -> None:
    """The root addon's ``flowproof_rest`` (mitmproxy hands a hook's fields to its handlers):
    wait for the rest of a hook `fire` started."""
    await task


async def _lifecycle(hook: commands.StartHook) -> None:
    # mitmproxy's ProxyConnectionHandler.handle_hook, but for its watchdog's disarming:
    # nothing here waits long but an intercepted flow, and the hook that waits for the
    # rest (an ordinary hook) disarms it.
    (data,) = hook.args()
    await ctx.master.addons.handle_lifecycle(hook)
    if isinstance(data, flow.Flow):
        await data.wait_for_resume()
