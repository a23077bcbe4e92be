"""This process's resident memory, from Linux's /proc/self: what the CPU memory figures of the
benchmarks read. It imports neither JAX nor torch, so a process measuring one side alone
(benchmarks/finetune_torch.py) holds only that side's libraries."""


def status_kib(field: str) -> int | None:
  """A memory field of /proc/self/status in KiB ('VmRSS': resident now; 'VmHWM': its peak since
  the process started or `reset_peak`); None without /proc. Not getrusage's ru_maxrss: Linux
  carries that over from the parent a subprocess is forked from."""
  try:
    with open('/proc/self/status', encoding='ascii') as f:
      return next((int(line.split()[1]) for line in f if line.startswith(field + ':')), None)
  except OSError:
    return None


def reset_peak() -> bool:
  """Sets the peak resident memory ('VmHWM') to the current one (Linux's clear_refs 5), so that
  the next reading counts what came after; False where the kernel does not allow it."""
  try:
    with open('/proc/self/clear_refs', 'w', encoding='ascii') as f:
      f.write('5')
  except OSError:
    return False
  return True
