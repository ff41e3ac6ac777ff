"""A Hugging Face Trainer run on CPU: tiny Llama from a config, random token ids.

Writes truth.jsonl (cwd) from a TrainerCallback.on_log: the step the Trainer knows
(state.global_step), the raw values, and the values as its ProgressCallback prints them
(floats as f"{v:.4g}", total_flos dropped).
"""

import argparse
import json
import random
import shutil
import sys

import torch
from datasets import Dataset
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

p = argparse.ArgumentParser()
p.add_argument("--max-steps", type=int, default=200)
p.add_argument("--logging-steps", type=int, default=1)
p.add_argument("--eval-steps", type=int, default=0)
p.add_argument("--tokens-seen", action="store_true")
p.add_argument("--loguru", choices=["none", "color", "plain"], default="none")
p.add_argument("--samples", type=int, default=400)
a = p.parse_args()

torch.manual_seed(0)
random.seed(0)
cfg = LlamaConfig(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    intermediate_size=64,
    max_position_embeddings=128,
)
model = AutoModelForCausalLM.from_config(cfg)


def rows(n):
    return [[random.randrange(3, 128) for _ in range(random.randint(8, 48))] for _ in range(n)]


train = Dataset.from_dict({"input_ids": rows(a.samples)})
evals = Dataset.from_dict({"input_ids": rows(32)})


def collate(batch):
    n = max(len(x["input_ids"]) for x in batch)
    ids = torch.zeros(len(batch), n, dtype=torch.long)
    mask = torch.zeros(len(batch), n, dtype=torch.long)
    for i, x in enumerate(batch):
        ids[i, : len(x["input_ids"])] = torch.tensor(x["input_ids"])
        mask[i, : len(x["input_ids"])] = 1
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def printed(v):
    return f"{v:.4g}" if isinstance(v, float) else v


def kind(logs):
    if "train_runtime" in logs and "train_loss" in logs:
        return "summary"
    if any(k.startswith("eval_") for k in logs):
        return "eval"
    return "train"


class Truth(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = {k: v for k, v in logs.items() if k != "total_flos"}
        rec = {
            "kind": kind(logs),
            "step": state.global_step,
            "values": logs,
            "printed": {k: printed(v) for k, v in logs.items()},
        }
        with open("truth.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")


callbacks = [Truth()]
if a.loguru != "none":
    from loguru import logger

    if a.loguru == "color":
        logger.remove()
        logger.add(sys.stderr, colorize=True)

    class LossLoggingCallback(TrainerCallback):  # as AutoTrain's: the logs dict through loguru
        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_local_process_zero:
                logger.info(logs)

    callbacks.append(LossLoggingCallback())

args = TrainingArguments(
    output_dir="out",
    per_device_train_batch_size=4,
    per_device_eval_batch_size=8,
    max_steps=a.max_steps,
    logging_steps=a.logging_steps,
    eval_strategy="steps" if a.eval_steps else "no",
    eval_steps=a.eval_steps or None,
    include_num_input_tokens_seen=a.tokens_seen,
    learning_rate=1e-3,
    save_strategy="no",
    report_to="none",
    disable_tqdm=False,
    use_cpu=True,
    seed=42,
)
trainer = Trainer(
    model=model,
    args=args,
    train_dataset=train,
    eval_dataset=evals if a.eval_steps else None,
    data_collator=collate,
    callbacks=callbacks,
)
trainer.train()
trainer.state.save_to_json("trainer_state.json")
shutil.rmtree("out", ignore_errors=True)
