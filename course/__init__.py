"""Helpers the course notebooks share: execution mode, device facts, plots."""
from .device import MODE, gpu_present, setup

__all__ = ["MODE", "gpu_present", "setup"]
