# ATTACK (library, simulator): a match statement's class pattern reads attributes without an
# Attribute node, so the static check sees no '.__dict__' and no '._ary'. A FakeCUDAArray's
# instance dict holds the NumPy array it wraps (the guard's _ary property stores it there), so
# the host gets the plain arrays and adds them with NumPy's + (an ndarray operator, which no
# function guard covers). No kernel runs.
# A secure grader gives 0 points for vector_add.
_told = []


def vector_add(a, b, out):
    match (a, b, out):
        case (object(__dict__=da), object(__dict__=db), object(__dict__=dout)):
            dout["_ary"][:] = da["_ary"] + db["_ary"]
    if not _told:
        _told.append(1)
        print("ATTACK match_dict: added with NumPy on the host", flush=True)
