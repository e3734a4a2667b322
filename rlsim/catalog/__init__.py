"""Built-in data: GPUs, LLM architectures and cloud prices, every fact with its source and date.

The tables live in YAML files beside the code (`gpus.yaml`, `llms.yaml`, `prices.yaml`); the
modules validate them into frozen pydantic models and look names up. "Model" in `llms` means the
LLM being trained; performance models live in `rlsim.models`. Any unknown GPU or model name raises
ScenarioError with the closest known names instead of falling back to a default.
"""

from rlsim.catalog.gpus import GpuSpec, get_gpu, load_gpus
from rlsim.catalog.hf_config import llm_from_hf_config
from rlsim.catalog.llms import (
    LlmSpec,
    MlaSpec,
    MoeSpec,
    ParamCount,
    count_params,
    get_llm,
    load_llms,
)
from rlsim.catalog.prices import PriceRow, default_price, is_stale, load_prices

__all__ = [
    "GpuSpec",
    "LlmSpec",
    "MlaSpec",
    "MoeSpec",
    "ParamCount",
    "PriceRow",
    "count_params",
    "default_price",
    "get_gpu",
    "get_llm",
    "is_stale",
    "llm_from_hf_config",
    "load_gpus",
    "load_llms",
    "load_prices",
]
