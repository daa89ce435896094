"""Model parallelism: cutting a model into consecutive stages run as a micro-batch pipeline."""
