"""Tokenizers and vocabularies: the BM25 word analyzer and WordPiece vocabulary spaces."""

from semiret.text.analyzer import TermDictionary, WordAnalyzer
from semiret.text.wordpiece import WordPieceVocabulary

__all__ = ["TermDictionary", "WordAnalyzer", "WordPieceVocabulary"]
