"""Downstream training (``gpse-dgl train``)."""
from .loop import (FORMAT, RunPlan, TaskSpec, build_downstream_model, compute_loss, format_summary,
                   model_from_config, plan_runs, summarize, task_spec, train_downstream)

__all__ = ["train_downstream", "TaskSpec", "task_spec", "build_downstream_model", "model_from_config",
           "compute_loss", "RunPlan", "plan_runs", "summarize", "format_summary", "FORMAT"]
