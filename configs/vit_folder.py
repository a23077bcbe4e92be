"""ViT on a local image folder: one sub-folder per class with PNG or JPEG images inside.

All images must share one size and number of channels. Without `train/`, `validation/`,
`test/` sub-folders, about 10% of each class is held out for validation and 10% for test.
Choose `model.patch_size` to divide the image size (e.g. 4 for 32x32 images).

Command:
  python train.py --config=configs/vit_folder.py \
      --config.dataset.folder=path/to/images --workdir=runs/vit_folder
  python eval.py --workdir=runs/vit_folder
Result: not measured here (needs a folder of your own).
"""

from configs import vit_digits


def get_config(arg: str | None = None):
  """`arg` is unused."""
  del arg
  config = vit_digits.get_config()
  config.dataset.update(name='image_folder', folder='', shift=2)
  config.model.patch_size = 4
  config.num_eval_decode = 256
  return config
