"""Question sets for the memory evaluation: loading, and errors that say where a file is wrong.

A set is JSON: `{"name", "conversations": [{"id", "documents": [{"id", "text", "time"}],
"questions": [{"id", "text", "evidence": [document ids], "category"}]}]}`. Times are ISO-8601
with a UTC offset; ids are unique within their conversation (conversations within the set);
evidence names documents of the question's own conversation. Other keys are ignored (the
development sets give each question its `answer`, for the reader).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


class DatasetError(Exception):
    """The data set file is unreadable or not in the expected shape; the message names where
    (a JSON path such as `$.conversations[1].questions[3].evidence[0]`)."""


# --- the data set ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    time: datetime


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    evidence: frozenset[str]
    category: str


@dataclass(frozen=True)
class Conversation:
    id: str
    documents: tuple[Document, ...]
    questions: tuple[Question, ...]


@dataclass(frozen=True)
class Dataset:
    name: str
    conversations: tuple[Conversation, ...]

    @property
    def questions(self) -> int:
        return sum(len(conversation.questions) for conversation in self.conversations)

    @property
    def documents(self) -> int:
        return sum(len(conversation.documents) for conversation in self.conversations)


def load(path: Path) -> Dataset:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise DatasetError(f"{path}: cannot read it ({error})") from error
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise DatasetError(
            f"{path}: not JSON ({error.msg} at line {error.lineno}, column {error.colno})"
        ) from error
    try:
        return parse(data)
    except DatasetError as error:
        raise DatasetError(f"{path}: {error}") from error


def parse(data: object) -> Dataset:
    """The data set in `data` (decoded JSON), or DatasetError naming the first problem's path.
    Keys other than the expected ones are ignored (a question's `answer`, say)."""
    root = _object(data, "$")
    name = _text(root, "name", "$")
    items = _list(root, "conversations", "$")
    if not items:
        raise DatasetError("$.conversations: is empty")
    conversations = []
    seen: dict[str, str] = {}
    for index, item in enumerate(items):
        where = f"$.conversations[{index}]"
        conversation = _conversation(item, where)
        _unique(seen, slug(conversation.id), f"{where}.id", "conversation id")
        conversations.append(conversation)
    if not slug(name):
        raise DatasetError(f"$.name: {name!r} has no letter or digit to name a scope with")
    return Dataset(name=name, conversations=tuple(conversations))


def _conversation(item: object, where: str) -> Conversation:
    fields = _object(item, where)
    conversation_id = _text(fields, "id", where)
    if not slug(conversation_id):
        raise DatasetError(f"{where}.id: {conversation_id!r} has no letter or digit")
    documents = []
    seen: dict[str, str] = {}
    for index, entry in enumerate(_list(fields, "documents", where)):
        path = f"{where}.documents[{index}]"
        document = _object(entry, path)
        doc_id = _text(document, "id", path)
        _unique(seen, doc_id, f"{path}.id", "document id")
        text = _text(document, "text", path)
        documents.append(Document(id=doc_id, text=text, time=_time(document, path)))
    questions = []
    asked: dict[str, str] = {}
    for index, entry in enumerate(_list(fields, "questions", where)):
        path = f"{where}.questions[{index}]"
        question = _object(entry, path)
        question_id = _text(question, "id", path)
        _unique(asked, question_id, f"{path}.id", "question id")
        evidence: list[str] = []
        for position, cited in enumerate(_list(question, "evidence", path)):
            at = f"{path}.evidence[{position}]"
            if not isinstance(cited, str):
                raise DatasetError(f"{at}: expected a string, got {_kind(cited)}")
            if cited not in seen:
                raise DatasetError(
                    f"{at}: {cited!r} is not a document of conversation {conversation_id!r}"
                )
            evidence.append(cited)
        if not evidence:
            raise DatasetError(f"{path}.evidence: is empty (nothing to score the question by)")
        questions.append(
            Question(
                id=question_id,
                text=_text(question, "text", path),
                evidence=frozenset(evidence),
                category=_text(question, "category", path),
            )
        )
    return Conversation(id=conversation_id, documents=tuple(documents), questions=tuple(questions))


def _object(value: object, where: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise DatasetError(f"{where}: expected an object, got {_kind(value)}")
    return value


def _field(fields: dict[str, object], key: str, where: str) -> object:
    if key not in fields:
        raise DatasetError(f"{where}: missing key {key!r}")
    return fields[key]


def _text(fields: dict[str, object], key: str, where: str) -> str:
    value = _field(fields, key, where)
    if not isinstance(value, str):
        raise DatasetError(f"{where}.{key}: expected a string, got {_kind(value)}")
    if not value.strip():
        raise DatasetError(f"{where}.{key}: is empty")
    return value


def _list(fields: dict[str, object], key: str, where: str) -> list[object]:
    value = _field(fields, key, where)
    if not isinstance(value, list):
        raise DatasetError(f"{where}.{key}: expected an array, got {_kind(value)}")
    return value


def _time(fields: dict[str, object], where: str) -> datetime:
    value = _text(fields, "time", where)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as error:
        raise DatasetError(f"{where}.time: {value!r} is not an ISO-8601 time") from error
    if moment.tzinfo is None:
        # valid_from is an instant: a naive time would be read in whatever zone the server has.
        raise DatasetError(f"{where}.time: {value!r} has no UTC offset (add Z or +hh:mm)")
    return moment


def _unique(seen: dict[str, str], key: str, where: str, what: str) -> None:
    if key in seen:
        raise DatasetError(f"{where}: duplicate {what} {key!r} (first at {seen[key]})")
    seen[key] = where


def _kind(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)


def slug(name: str) -> str:
    """A scope segment (`[a-z0-9_-]`, at most 64) for a data set or conversation name."""
    return re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-")[:64]
