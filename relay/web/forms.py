"""Query parameters of the dashboard and the API, validated: a bad value is a 400 with the reason, never a 500."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypedDict, TypeVar

from django import forms
from django.http import HttpRequest, HttpResponse, QueryDict

from relay.web.tableusage import DEFAULT_SORT, SORT_KEYS

MAX_QUERY = 200
MAX_PAGE = 1_000_000


class UsageParams(TypedDict):
    query: str
    sort: str
    page: int
    per_page: int


class SchemaParams(TypedDict):
    query: str
    page: int


class QueryError(ValueError):
    """Bad query parameters; the message lists them."""


def _search_field() -> forms.CharField:
    return forms.CharField(required=False, max_length=MAX_QUERY, strip=True)


def _no_control_characters(value: str) -> str:
    # NUL in particular: PostgreSQL rejects it in text parameters, which would surface as a 500.
    if any(ord(ch) < 32 for ch in value):
        raise forms.ValidationError("must not contain control characters")
    return value


class UsageQuery(forms.Form):
    q = _search_field()
    sort = forms.ChoiceField(required=False, choices=[(key, key) for name in SORT_KEYS for key in (name, f"-{name}")])
    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE)
    per_page = forms.IntegerField(required=False, min_value=10, max_value=100)

    def clean_q(self) -> str:
        return _no_control_characters(self.cleaned_data["q"])


class SchemaQuery(forms.Form):
    q = _search_field()
    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_PAGE)

    def clean_q(self) -> str:
        return _no_control_characters(self.cleaned_data["q"])


class ClientQuery(forms.Form):
    head = forms.IntegerField(required=False, min_value=0, max_value=500)


def _errors(form: forms.Form) -> str:
    return "; ".join(f"{name}: {' '.join(str(e) for e in errors)}" for name, errors in form.errors.items())


def usage_params(data: QueryDict) -> UsageParams:
    form = UsageQuery(data)
    if not form.is_valid():
        raise QueryError(_errors(form))
    values = form.cleaned_data
    return {
        "query": values["q"] or "",
        "sort": values["sort"] or DEFAULT_SORT,
        "page": values["page"] or 1,
        "per_page": values["per_page"] or 50,
    }


def schema_params(data: QueryDict) -> SchemaParams:
    form = SchemaQuery(data)
    if not form.is_valid():
        raise QueryError(_errors(form))
    return {"query": form.cleaned_data["q"] or "", "page": form.cleaned_data["page"] or 1}


def client_params(data: QueryDict, default_head: int = 20) -> int:
    form = ClientQuery(data)
    if not form.is_valid():
        raise QueryError(_errors(form))
    head = form.cleaned_data["head"]
    return default_head if head is None else head


Params = TypeVar("Params")
Response = TypeVar("Response", bound=HttpResponse)
ViewArgs = ParamSpec("ViewArgs")


def with_params(
    parse: Callable[[QueryDict], Params], bad: Callable[[HttpRequest, str], Response]
) -> Callable[
    [Callable[Concatenate[HttpRequest, Params, ViewArgs], Response]],
    Callable[Concatenate[HttpRequest, ViewArgs], Response],
]:
    """A view decorator: ``parse`` the query string and pass the result after the request, or answer ``bad`` (a 400
    with the reason) when it is invalid. Goes under the login check, so an anonymous caller never sees a 400."""

    def decorate(
        view: Callable[Concatenate[HttpRequest, Params, ViewArgs], Response],
    ) -> Callable[Concatenate[HttpRequest, ViewArgs], Response]:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, /, *args: ViewArgs.args, **kwargs: ViewArgs.kwargs) -> Response:
            try:
                params = parse(request.GET)
            except QueryError as exc:
                return bad(request, str(exc))
            return view(request, params, *args, **kwargs)

        return wrapper

    return decorate
