"""The special ids, the same in every vocabulary of Attend's own tokenizers.

`<pad>`=0, `<bos>`=1, `<eos>`=2, `<unk>`=3. A pretrained checkpoint's tokenizer has its own
(`data.pretrained_tokenizer`), but must pad with `PAD_ID`, which data/ pads every row with.
"""

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ('<pad>', '<bos>', '<eos>', '<unk>')
