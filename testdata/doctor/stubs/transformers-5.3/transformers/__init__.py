raise ImportError("qwenref doctor's probe must read transformers' source, not import it")
