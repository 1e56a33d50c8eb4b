# Waits for a queue of 100 requests that never forms at a light load: requests wait forever.
def schedule(waiting, running, free_blocks, now):
    return [0] if len(waiting) >= 100 else []
