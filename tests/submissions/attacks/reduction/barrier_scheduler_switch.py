# ATTACK (forged, simulator, runs past the static check): block_sums with its barrier inside the if (the
# bug the lab warns about), where the threads inside the if do not call cuda.syncthreads() but hand control
# straight to the simulator's block scheduler, posing as waiting at a barrier (threading reached as
# asyncio.events.threading: the static check refuses only `import threading`). The threads outside the if
# never wait: a lenient scheduler would release the posers and take the sum.
# A secure grader gives 0 points for block_sums: who waits is the scheduler's to judge, whatever a thread claims.
import asyncio.events as events

from numba import cuda, float32

BLOCK = 256


def pose_as_waiting():
    me = events.threading.current_thread()
    me.state = 2  # the scheduler's "waits at a barrier"
    me.hub.switch(me)


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
            pose_as_waiting()
        s //= 2
    if t == 0:
        partials[cuda.blockIdx.x] = buf[0]


def block_sums(x, partials):
    block_sums_kernel[partials.shape[0], BLOCK](x, partials)
