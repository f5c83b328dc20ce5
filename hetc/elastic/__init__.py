"""The supervisor of `hetc run`: launches a compiled job, watches for lost nodes and an
availability file, re-plans, recompiles and relaunches (docs/elastic.md). It sits beside the
CLI at the top of the import order and never imports torch: it only starts processes."""
