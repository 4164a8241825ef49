"""What one grading run sets up once and shares among its students' jobs (`RunSetup`, the base
of `grading.Grader`, whose constructor sets the attributes used here): the pre-imported worker
that forks the jobs (`_launch`), the base gradebook copied into every job, and each cell's time
limit, derived from the reference solution's times (`cell_limits`). `job_env`: a job's
environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
from pathlib import Path

from . import cell_limits, gradebook_merge, nbgrader_app, sandbox
from . import worker as job_worker


def job_env(course: Path, home: Path) -> dict[str, str]:
    """A job's environment: a few of ours, its own home and Jupyter folders, the grading mode."""
    home.mkdir(parents=True, exist_ok=True)
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "TZ", "VIRTUAL_ENV", "PYTHONPATH")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), env.get("PATH", "/usr/bin:/bin")]
    )
    env.update(
        HOME=str(home),
        TRANSFORMER_LAB_COURSE_ROOT=str(course),
        TRANSFORMER_LAB_STUDENT_DIR=str(home / "student_package"),
        TRANSFORMER_LAB_QUICK=os.environ.get("TRANSFORMER_LAB_QUICK", "1"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTER_CONFIG_DIR=str(home / "jupyter"),
        IPYTHONDIR=str(home / "ipython"),
        MPLCONFIGDIR=str(home / "mpl"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    env.update(sandbox.GRADING_ENV)
    return env


class RunSetup:
    """The run's shared parts; see the module docstring."""

    # Whether jobs are forked from one pre-imported worker: a local run starts its own; `cluster`
    # grades elsewhere (its Dask workers use `worker.process_worker`).
    local_jobs = True

    def _start_worker(self) -> None:
        """Start this run's worker (its imports overlap the run's set-up); on failure every job
        starts its own interpreter and says why (`_launch`)."""
        self._worker, self._worker_problem = None, None
        if not (self.use_worker and self.local_jobs):
            return
        try:
            self._worker = job_worker.Worker.start(
                job_env(self.course, self.run_dir / "worker-home"), self.run_dir / "worker"
            )
        except OSError as error:
            self._worker_problem = f"the grading worker could not start: {error}"

    def _stop_worker(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def _launch(self, command: list[str], flags: list[str], **job) -> sandbox.Result:
        """The job (trusted code: never boxed; its student's process is), forked from the run's
        worker, or (worker switched off, or unable to serve: the reason goes into the flags) in
        an interpreter of its own (`sandbox.run` without the box)."""
        chosen = self._worker
        problem = self._worker_problem
        if chosen is not None:
            problem = chosen.available()
            if problem is None:
                return chosen.run(command, **job, isolate=False)
        if problem:
            flags.append(
                f"grading worker unavailable ({problem}): the job started its own interpreter"
            )
        return sandbox.run(command, **job, isolate=False)

    def base_gradebook(self) -> Path:
        """A gradebook with the assignment registered and nothing else: prepared once per
        source (cached under autograder/work/base_gradebooks/, keyed by the digest of the
        source notebooks and the autograder configuration), copied into every job."""
        with self._base_lock:  # not self.lock: it may run beside the reference timing
            if self._base is None:
                digest = hashlib.sha256()
                for path in sorted(
                    [
                        *(self.course / "solutions" / self.assignment).glob("*.ipynb"),
                        *(self.course / "autograder").glob("*.py"),
                    ]
                ):
                    digest.update(path.name.encode() + b"\0" + path.read_bytes())
                cache = self.course / "autograder" / "work" / "base_gradebooks"
                cached = cache / f"{self.assignment}-{digest.hexdigest()[:20]}.db"
                if not cached.is_file():
                    made = nbgrader_app.prepare_gradebook(
                        self.course, self.assignment, self.run_dir / "base", self._run_trusted
                    )
                    cache.mkdir(parents=True, exist_ok=True)
                    for old in cache.glob(f"{self.assignment}-*.db"):
                        old.unlink(missing_ok=True)
                    shutil.copy(made, cached.with_suffix(".tmp"))
                    cached.with_suffix(".tmp").replace(cached)
                self._base = cached
            return self._base

    def _run_trusted(self, command: list[str], cwd: Path) -> tuple[int | None, str]:
        """A trusted command of the run's own (not a student's), launched as a job is (forked
        from the pre-imported worker where there is one), in `cwd`, a folder of a course copy
        under the run's folder: (exit code, its output's tail)."""
        env = job_env(cwd.parent, cwd.parent / "home")
        result = self._launch(command, [], cwd=cwd, env=env, limits=self.limits, keep=cwd.parent)
        return result.returncode, (result.stdout + result.stderr)[-3000:]

    def merge(self, records: list[dict]) -> None:
        """The assignment's records (`records`, as kept in the course) into the course's
        gradebook: as the run's last trusted job, forked from its worker where one serves (the
        job reads the same records from the course), so that this process never imports
        nbgrader (1.25 CPU s after the grader's own imports, 3.7 in a fresh interpreter:
        benchmarks/history/journal.md §38); else here. Raises when the merge fails."""
        if self._worker is None or self._worker.available() is not None:
            gradebook_merge.merge_into_gradebook(self.course, records)
            return
        folder = self.run_dir / "merge"
        (folder / "work").mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-c", gradebook_merge.MERGE_JOB, str(self.course)]
        code, output = self._run_trusted([*command, self.assignment], folder / "work")
        if code != 0:
            raise RuntimeError(f"the merge exited {code}: {output.strip()[-600:]}")

    def _prepare_base(self) -> None:
        """`base_gradebook` ahead of the first job; a failure is the first job's to report."""
        with contextlib.suppress(Exception):
            self.base_gradebook()

    def time_limits(self) -> cell_limits.CellLimits:
        """Each cell's time limit for this run (`cell_limits`): the instructor's fixed
        `cell_timeout`, else derived from the reference solution's times (measured once, cached)."""
        with self.lock:
            if self._limits is None:
                self._limits = self._derive_limits()
            return self._limits

    def _derive_limits(self) -> cell_limits.CellLimits:
        if self.limits.cell_timeout:
            return cell_limits.fixed(self.limits.cell_timeout)
        settings = cell_limits.course_settings(self.course)
        floor = self.limits.cell_floor or settings.get("floor", cell_limits.FLOOR)
        factor = self.limits.cell_factor or settings.get("factor", cell_limits.FACTOR)
        budget = self.limits.cell_budget or settings.get("budget", cell_limits.BUDGET)
        try:
            times = cell_limits.reference_times(
                self.course, self.assignment, say=self.say, measure=self._measure
            )
        except RuntimeError as error:
            self.say(f"warning: {error}; every cell gets {cell_limits.FALLBACK:g} s")
            return cell_limits.fixed(cell_limits.FALLBACK)
        return cell_limits.derive(times, floor, factor, budget)

    def _measure(self, notebook: Path) -> dict[str, float]:
        """The reference solution timed as a student's notebook runs (`judge.time_notebook`:
        its cells in a process of their own, its tests here; trusted code, so unboxed)."""
        from .judge import time_notebook

        workdir = self.run_dir / "reference"
        times, failed = time_notebook(notebook, workdir)
        if failed:
            self.say(f"warning: the reference solution fails {', '.join(failed)}")
        return times
