"""transformers' side of bench/models/run_llama_bench.sh (docs/models.md, "Speed").

  llama_twin.py make DIR            a Llama config for the speed rows (DIR/config.json)
  llama_twin.py make-checkpoint DIR  random weights of ~1 GB fp32, saved by
                                     save_pretrained in 200 MB shards
  llama_twin.py step DIR BATCH TOKENS STEPS WARMUP ATTENTION PROCESSES
        LlamaForCausalLM(config, attn_implementation=ATTENTION): forward with
        labels (transformers' causal-LM loss) + backward on random ids; with
        2 processes, DistributedDataParallel over gloo, as Accelerate would run it
  llama_twin.py load DIR            from_pretrained(DIR): seconds, peak RSS rise
Each prints one "result side=python ..." line.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import transformers

SPEED_CONFIG = dict(vocab_size=8192, hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
                    num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024,
                    rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
# ~262M parameters: 1.05 GB in fp32.
CHECKPOINT_CONFIG = dict(vocab_size=32000, hidden_size=1536, intermediate_size=4096,
                         num_hidden_layers=8, num_attention_heads=12, num_key_value_heads=4,
                         max_position_embeddings=2048, tie_word_embeddings=False)


def rss_bytes(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return -1


def make(directory, values):
    config = transformers.LlamaConfig(**values)
    os.makedirs(directory, exist_ok=True)
    config.save_pretrained(directory)
    return config


def make_checkpoint(directory):
    config = make(directory, CHECKPOINT_CONFIG)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(directory, max_shard_size="200MB", safe_serialization=True)


def steps(rank, world, directory, batch, tokens, count, warmup, attention, port, threads):
    torch.set_num_threads(threads)
    if world > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                world_size=world)
    config = transformers.LlamaConfig.from_pretrained(directory)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation=attention)
    model.train()
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    ids = torch.randint(config.vocab_size, (batch, tokens))
    start = None
    trace = os.environ.get("LLAMA_TRACE") if rank == 0 else None
    for step in range(warmup + count):
        if step == warmup:
            start = time.perf_counter()
        profiler = None
        if trace and step == warmup:  # as llama_bench's LLAMA_TRACE
            profiler = torch.autograd.profiler.profile()
            profiler.__enter__()
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if profiler is not None:
            profiler.__exit__(None, None, None)
            profiler.export_chrome_trace(trace)
    seconds = time.perf_counter() - start
    if rank == 0:
        print("result side=python attention=%s processes=%d tokens_per_s=%.1f"
              % (attention, world, batch * tokens * count * world / seconds), flush=True)
    if world > 1:
        dist.destroy_process_group()


def load(directory):
    before = rss_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as refs:  # VmHWM counts from here
        refs.write("5")
    start = time.perf_counter()
    model = transformers.LlamaForCausalLM.from_pretrained(directory, torch_dtype=torch.float32)
    seconds = time.perf_counter() - start
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print("result side=python load_s=%.3f peak_rise_bytes=%d parameter_bytes=%d"
          % (seconds, rss_bytes("VmHWM") - before, parameter_bytes), flush=True)


def main(argv):
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "make" and len(argv) == 3:
        make(argv[2], SPEED_CONFIG)
    elif mode == "make-checkpoint" and len(argv) == 3:
        make_checkpoint(argv[2])
    elif mode == "step" and len(argv) == 9:
        directory, batch, tokens, count, warmup, attention, world = argv[2:]
        world = int(world)
        threads = max(1, (os.cpu_count() or 1) // world)
        port = 29400 + os.getpid() % 1000
        common = (world, directory, int(batch), int(tokens), int(count), int(warmup), attention,
                  port, threads)
        if world == 1:
            steps(0, *common)
        else:
            mp.spawn(steps, args=common, nprocs=world)
    elif mode == "load" and len(argv) == 3:
        load(argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
