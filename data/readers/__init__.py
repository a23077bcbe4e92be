"""Readers of users' own files: TSV corpora, image folders and the original bAbI files.

Each is a TFDS builder whose builder config is made from the file or folder (named after it and
a hash of its contents, so an edited file is prepared afresh), prepared offline on first use.
"""
