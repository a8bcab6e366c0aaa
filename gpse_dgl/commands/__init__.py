"""One module per CLI verb; each exposes a click command named ``command``."""


def cli_overrides(overrides, device, out_dir) -> list:
    """``--set key=value`` items plus the ``--device`` and ``--out`` shortcuts, as recipe overrides."""
    overrides = list(overrides)
    if device is not None:
        overrides.append(f"device={device}")
    if out_dir is not None:
        overrides.append(f"general_pipeline.save_path={out_dir}")
    return overrides
