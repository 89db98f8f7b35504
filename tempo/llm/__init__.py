"""Large-language-model decoding with recurrent tensors: ``tpo.llm.Llama``."""
from tempo.llm.attention import Attention
from tempo.llm.config import LlamaConfig
from tempo.llm.model import Llama
from tempo.llm.sampling import Sampling

__all__ = ["Attention", "Llama", "LlamaConfig", "Sampling"]
