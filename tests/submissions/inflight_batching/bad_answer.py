# Returns a word, not positions.
def schedule(waiting, running, free_blocks, now):
    return "all"
