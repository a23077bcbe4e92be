"""The environment of a subprocess that simulates CPU devices (tests of meshes and collectives)."""

import os


def cpu_environment(devices: int = 1) -> dict[str, str]:
  """This process's environment, CPU only (on a GPU machine too), with `devices` simulated CPU
  devices; the suite's other XLA flags (tests/conftest.py) stay."""
  env = dict(os.environ, JAX_PLATFORMS='cpu')
  env['XLA_FLAGS'] = ' '.join(
    [
      *(f for f in env.get('XLA_FLAGS', '').split() if 'device_count' not in f),
      f'--xla_force_host_platform_device_count={devices}',
    ]
  )
  return env
