"""Memory the judge owns and a runner may map: device memory shared by file descriptor (CUDA's
virtual memory management API) on a GPU, or a memfd in the simulator and for host arrays.

The judge allocates every buffer a submission touches, fills and poisons it, and reads it back
itself. A runner gets a chunk's file descriptor and maps it into its own address space; it
never gets a pointer into the judge's process, and nothing it writes outside the chunks it was
given reaches the judge.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field

import numpy as np

ALIGN = 512  # bytes: every array starts here, so 16-byte vector loads stay aligned


def driver_ok(res):
    """The value(s) a CUDA driver call (cuda.bindings) returned, or its error as an exception."""
    err = res[0]
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {err!r}")
    return None if len(res) == 1 else (res[1] if len(res) == 2 else res[1:])


class DeviceChunk:
    """One exportable device allocation, mapped in the judge and seen by CuPy."""

    def __init__(self, size: int, exportable: bool = True) -> None:
        import cupy as cp
        from cuda.bindings import driver as cu

        self.kind = "device"
        dev = cp.cuda.Device().id
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = dev
        if exportable:  # (in check(), nothing leaves the process: no handle type, which WSL lacks)
            prop.requestedHandleTypes = cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        gran = int(driver_ok(cu.cuMemGetAllocationGranularity(
            prop, cu.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM)))
        self.size = max(gran, -(-size // gran) * gran)
        self.handle = driver_ok(cu.cuMemCreate(self.size, prop, 0))
        self.ptr = int(driver_ok(cu.cuMemAddressReserve(self.size, 0, 0, 0)))
        driver_ok(cu.cuMemMap(self.ptr, self.size, 0, self.handle, 0))
        desc = cu.CUmemAccessDesc()
        desc.location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = dev
        desc.flags = cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        driver_ok(cu.cuMemSetAccess(self.ptr, self.size, [desc], 1))
        self._mem = cp.cuda.UnownedMemory(self.ptr, self.size, self)

    def export(self) -> int:
        """A new file descriptor for the allocation (the caller sends and closes it)."""
        from cuda.bindings import driver as cu

        return int(driver_ok(cu.cuMemExportToShareableHandle(
            self.handle, cu.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)))

    def view(self, offset: int, shape, dtype):
        import cupy as cp

        return cp.ndarray(tuple(shape), np.dtype(dtype), cp.cuda.MemoryPointer(self._mem, offset))

    def free(self) -> None:
        from cuda.bindings import driver as cu

        if self.handle is not None:
            cu.cuMemUnmap(self.ptr, self.size)
            cu.cuMemAddressFree(self.ptr, self.size)
            cu.cuMemRelease(self.handle)
            self.handle = None


class HostChunk:
    """Shared host memory: an anonymous memory file, mapped here and in the runner."""

    def __init__(self, size: int, exportable: bool = True) -> None:
        import mmap

        self.kind = "host"
        self.size = max(4096, -(-size // 4096) * 4096)
        if not exportable:  # check() on any system (memfd is Linux's)
            self.fd = None
            self.buf = mmap.mmap(-1, self.size)
            return
        self.fd = os.memfd_create("autograder", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.size)
        self.buf = mmap.mmap(self.fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def export(self) -> int:
        return os.dup(self.fd)

    def view(self, offset: int, shape, dtype):
        dtype = np.dtype(dtype)
        n = int(np.prod(shape)) if len(shape) else 1
        return np.frombuffer(self.buf, dtype=dtype, count=n, offset=offset).reshape(tuple(shape))

    def free(self) -> None:
        if self.buf is not None:
            try:
                self.buf.close()
            except BufferError:
                pass  # a view is still alive; the mapping goes when it does
            self.buf = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@dataclass
class Buf:
    """One array in a chunk: the judge's view of it and how a runner finds it."""

    chunk_id: int
    offset: int
    shape: tuple
    dtype: str
    where: str  # "device", "host" (pageable NumPy) or "pinned"
    view: object  # CuPy array (device) or NumPy array (host), the judge's own

    def desc(self, name: str = "") -> dict:
        return {"kind": "array", "chunk": self.chunk_id, "offset": self.offset, "shape": list(self.shape),
                "dtype": np.dtype(self.dtype).str, "where": self.where, "name": name}


# Chunk ids are unique in the process, not per arena: a reference runner that outlives one
# submission's arena (a judge grading several) never mistakes a new chunk for an old one.
_CHUNK_IDS = itertools.count(1)


@dataclass
class Arena:
    """Chunks of shared memory, each carved into aligned arrays. ``device`` is False in the
    simulator: then every array is host memory."""

    device: bool
    exportable: bool = True  # False in check(): nothing is shared with another process
    chunks: dict = field(default_factory=dict)

    def chunk(self, size: int, host: bool = False) -> int:
        cid = next(_CHUNK_IDS)
        self.chunks[cid] = DeviceChunk(size, self.exportable) if (self.device and not host) \
            else HostChunk(size, self.exportable)
        return cid

    def carve(self, cid: int, layout: list[tuple[tuple, str]], where: str = "device") -> list[Buf]:
        c = self.chunks[cid]
        off, out = 0, []
        for shape, dtype in layout:
            n = int(np.prod(shape)) if len(shape) else 1
            out.append(Buf(cid, off, tuple(shape), str(np.dtype(dtype)), where, c.view(off, shape, dtype)))
            off += -(-max(n * np.dtype(dtype).itemsize, 1) // ALIGN) * ALIGN
        return out

    @staticmethod
    def bytes_for(layout: list[tuple[tuple, str]]) -> int:
        total = 0
        for shape, dtype in layout:
            n = int(np.prod(shape)) if len(shape) else 1
            total += -(-max(n * np.dtype(dtype).itemsize, 1) // ALIGN) * ALIGN
        return total

    def alloc(self, layout: list[tuple[tuple, str]], where: str = "device") -> tuple[int, list[Buf]]:
        host = where != "device" or not self.device
        cid = self.chunk(self.bytes_for(layout), host=host)
        return cid, self.carve(cid, layout, where if self.device else ("device" if where == "device" else where))

    def free(self, cid: int) -> None:
        c = self.chunks.pop(cid, None)
        if c is not None:
            c.free()

    def free_all(self) -> None:
        for cid in list(self.chunks):
            self.free(cid)
