# ATTACK (library, GPU): CuPy's own dot product for the sum of squares, inside eval() of a string (the
# static check forbids *.dot by name only, and no run-time guard wraps CuPy array methods).
# A secure grader gives 0 points for sum_squares.
def sum_squares(x, out):
    out[...] = eval("x.dot(x)", {"x": x})
