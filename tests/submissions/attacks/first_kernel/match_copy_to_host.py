# ATTACK (library, runs past the static check): the host round trip the exercise forbids by name
# (*.copy_to_host, *.copy_to_device), with the methods taken by a match statement's class pattern
# (`case object(copy_to_host=get)`): no attribute node names them, so the static check saw no use.
# A secure grader gives 0 points for vector_add: a class pattern's keywords are attribute accesses.
_told = []


def vector_add(a, b, out):
    match (a, b, out):
        case (object(copy_to_host=get_a), object(copy_to_host=get_b), object(copy_to_device=put)):
            put(get_a() + get_b())
    if not _told:
        _told.append(1)
        print("ATTACK match_copy_to_host: added on the host through case object(copy_to_host=f)", flush=True)
