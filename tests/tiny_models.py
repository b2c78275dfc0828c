"""A Qwen2-Audio-architecture model folder that can be built offline, for structural tests of omni mode.

No audio LLM's weights are reachable here, so this folder pairs the real Qwen2-Audio classes with
parts that ship in installed packages: the real ``Qwen2AudioProcessor`` (its chat template is the one
transformers ships), a real ``WhisperFeatureExtractor`` at Qwen2-Audio's 128 mel bins, and a byte-level BPE
tokenizer (the bundled Whisper's ``tokenizer.json``) with Qwen2-Audio's special tokens added. The config is the
real ``Qwen2AudioConfig`` shrunk to two small layers, and vLLM runs it with ``load_format="dummy"``: random
weights, so what it *says* is noise, but vLLM's own multi-modal input processing, the audio encoder and the
placeholder expansion are the real code paths. Never a default: only tests build this.
"""

from __future__ import annotations

from pathlib import Path

from vita.config import Config

SPECIAL = ["<|im_start|>", "<|im_end|>", "<|audio_bos|>", "<|AUDIO|>", "<|audio_eos|>"]


def qwen2_audio_processor():
    from transformers import Qwen2AudioProcessor, Qwen2TokenizerFast, WhisperFeatureExtractor

    tokenizer = Qwen2TokenizerFast(tokenizer_file=str(Config().models_path() / "whisper-base" / "tokenizer.json"),
                                   bos_token=None, eos_token="<|im_end|>", unk_token=None, pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL})
    template = Qwen2AudioProcessor.default_chat_template.fget(None)
    return Qwen2AudioProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=128), tokenizer=tokenizer,
                               chat_template=template)


def build_tiny_qwen2_audio(out: Path) -> Path:
    from transformers import Qwen2AudioConfig

    processor = qwen2_audio_processor()
    processor.save_pretrained(out)
    tokenizer = processor.tokenizer
    config = Qwen2AudioConfig(
        audio_config={"model_type": "qwen2_audio_encoder", "d_model": 64, "encoder_layers": 2,
                      "encoder_attention_heads": 2, "encoder_ffn_dim": 128, "num_mel_bins": 128},
        text_config={"model_type": "qwen2", "vocab_size": len(tokenizer), "hidden_size": 64,
                     "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                     "num_key_value_heads": 1, "max_position_embeddings": 2048},
        audio_token_index=tokenizer.convert_tokens_to_ids("<|AUDIO|>"),
    )
    config.architectures = ["Qwen2AudioForConditionalGeneration"]
    config.save_pretrained(out)
    return out
