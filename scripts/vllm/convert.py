"""SmolLM2-135M-Instruct from its PyPI wheel (a Q4_1 GGUF) as float32 safetensors, which vLLM's CPU
build can serve (it cannot serve the GGUF): transformers dequantizes the GGUF on load (the `gguf`
package), then the model is saved without its GGUF quantization config, which transformers
refuses to serialize.

    python convert.py MODEL.gguf OUT_DIR
"""

import sys
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype="float32")
model.hf_quantizer = None  # the weights are float32 now: nothing of the GGUF is left to keep
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.is_quantized = False
model.save_pretrained(out, safe_serialization=True)
tokenizer.save_pretrained(out)
print(f"converted: {out}")
