"""Teacher vectors for a machine that lacks the teacher models: `python scripts/device/teacher_cache_by_name.py train
inference-free ... --teacher-cache .gpu/if-teachers` runs the real training command with each teacher's identity in the
cache keys being its name (a model folder's is otherwise a hash of its weights), so the GPU machine, given the same
teacher names and the cache but not the folders, reads every vector and never loads a teacher. Stop it once training
starts (its log then shows the student's first batch): the cache is complete.
"""
import sys

import semiret.training.teachers as teachers

teachers.model_identity = lambda model: model

from semiret.cli import main  # noqa: E402

sys.argv = ["semiret", *sys.argv[1:]]
main()
