"""The engines that turn text into translations behind `nmt.decode.engine.Engine`: `Translator`
(PyTorch models: batching, worker processes, packed weights, forced scoring, one sentence's
attention) and `CT2Translator` (an `nmt export` through CTranslate2), and `open_translator`, which
picks one for a directory. Everything above them speaks only to the Engine contract."""
