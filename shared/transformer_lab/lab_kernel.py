"""The course's Python kernel in JupyterLab, and the notebook metadata that matches it.

    python -m transformer_lab.lab_kernel -f CONNECTION_FILE

When a kernel connects, JupyterLab writes its ``language_info`` (from the kernel's info reply)
and its ``kernelspec`` into the notebook's metadata, and a value that differs from the saved one
marks the notebook modified: closing a notebook the student never touched then asks "Save
changes?". ipykernel's ``language_info`` carries the Python version, which differs from machine
to machine, so no committed notebook can match it. This kernel is ipykernel's with one change:
its ``language_info`` is `LANGUAGE_INFO`, the same everywhere; `transformer_lab.notebook_setup`
writes exactly `LANGUAGE_INFO` and `KERNELSPEC` into every notebook, so an opened notebook stays
unmodified. `make lab` and `make instructor-lab` put ``shared/jupyter/data`` on ``JUPYTER_PATH``,
whose ``kernels/python3/kernel.json`` starts this module (shared/jupyter/README.md). Elsewhere
(Colab, the grader) the notebooks' ``python3`` kernelspec finds the usual ipykernel.
"""

from __future__ import annotations

from ipykernel.ipkernel import IPythonKernel
from ipykernel.kernelapp import IPKernelApp

# what JupyterLab writes (kernelspec: kernel.json's display name and language, the kernel's name)
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# ipykernel's language_info without "version"
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}


class CourseKernel(IPythonKernel):
    """ipykernel's kernel, reporting `LANGUAGE_INFO` (no Python version) to the notebook."""

    language_info = LANGUAGE_INFO


def main() -> None:
    IPKernelApp.launch_instance(kernel_class=CourseKernel)


if __name__ == "__main__":
    main()
