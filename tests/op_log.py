"""OpLog: the ops a block of code dispatches, for tests of graph safety and of custom-op boundaries."""

from torch.utils._python_dispatch import TorchDispatchMode


class OpLog(TorchDispatchMode):
    """``with OpLog() as log: ...`` records every dispatched op: ``log.ops`` holds full names
    (``aten.add.Tensor``, ``mla_edu.fill_page_table.default``), ``log.packets`` the overload
    packets (``aten.add``)."""

    def __init__(self):
        super().__init__()
        self.funcs = []
        self.calls = []  # (func, args)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.funcs.append(func)
        self.calls.append((func, args))
        return func(*args, **(kwargs or {}))

    @property
    def ops(self) -> list[str]:
        return [str(f) for f in self.funcs]

    @property
    def packets(self) -> list[str]:
        return [str(f.overloadpacket) for f in self.funcs]
