"""The fast paths: a log's lines read in bulk, by Arrow and numpy, to the same records
the general line parser (:mod:`dflash_diag.logs.lines`) would give.

- :mod:`.jsonlines`: JSON lines, and the HF Trainer's dict lines, by pyarrow's JSON
  reader;
- :mod:`.lineshape`: a large free-text log whose lines share one shape, through a
  template (:mod:`.template`) applied by pyarrow's CSV tokenizer (:mod:`.rows`) and
  word arithmetic on the numbers (:mod:`.columns`, :mod:`.layout`), the lines no
  template reads handed back (:mod:`.leftover`).

They import the grammar and the line parser below them, never the readers above
(``tests/logs/test_layers.py``).
"""
