"""Private feature extraction: text documents to tf-idf rows with a private vocabulary."""

from . import text
from .text import DPTfidfVectorizer

__all__ = ["DPTfidfVectorizer", "text"]
