# ATTACK (forged, simulator; ran past the static check until it read all graded code): block_sums with its barrier inside the if (the
# bug the lab warns about), and the simulator's strict barrier check switched off. A helper called at load
# (the static check did not read it) puts back the simulator's own lenient barrier: a block manager that
# releases a barrier once every thread still running waits somewhere, and a syncthreads that only waits.
# A secure grader gives 0 points for block_sums: the check must hold whatever the submission's code does to
# the simulator's classes.
import itertools

from numba import cuda, float32
from numba.cuda.simulator import kernel as sim

BLOCK = 256


def _lax_syncthreads(self):
    self.syncthreads_blocked = True
    self.syncthreads_event.wait()
    self.syncthreads_event.clear()


def _lax_run(self, grid_point, *args):
    threads, live, waiting = set(), set(), set()
    for block_point in itertools.product(*(range(d) for d in self._block_dim)):
        def target():
            self._f(*args)

        t = sim.BlockThread(target, self, grid_point, block_point, self._debug)
        t.start()
        threads.add(t)
        live.add(t)
    while live:
        for t in live:
            if t.syncthreads_blocked:
                waiting.add(t)
        if live == waiting:
            for t in waiting:
                t.syncthreads_blocked = False
                t.syncthreads_event.set()
            waiting = set()
        live = {t for t in live if t.is_alive()}


def _switch_off(manager, thread):
    manager.run = _lax_run
    thread.syncthreads = _lax_syncthreads
    print("ATTACK barrier_lax_manager: the simulator's barriers are lenient again", flush=True)


_switch_off(sim.BlockManager, sim.BlockThread)


@cuda.jit
def block_sums_kernel(x, partials):
    buf = cuda.shared.array(BLOCK, float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * BLOCK + t
    buf[t] = x[i] if i < x.shape[0] else float32(0)
    cuda.syncthreads()
    s = BLOCK // 2
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
            cuda.syncthreads()
        s //= 2
    if t == 0:
        partials[cuda.blockIdx.x] = buf[0]


def block_sums(x, partials):
    block_sums_kernel[partials.shape[0], BLOCK](x, partials)
