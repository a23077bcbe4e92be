"""The TFDS datasets Attend generates offline (array_record files, no TensorFlow, no network).

Each module defines one `tfds.core.GeneratorBasedBuilder`, registered by TFDS under its name when
the module is imported; `generated` and `text_pairs` hold what several of them share.
"""
