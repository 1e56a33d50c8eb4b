# Admits everything waiting, up to MAX_RUNNING, whatever the free blocks: the engine refuses.
def schedule(waiting, running, free_blocks, now):
    return list(range(min(len(waiting), engine.MAX_RUNNING - len(running))))
