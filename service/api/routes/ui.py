"""GET /ui: the dashboard (``GET /`` leads there), a static page served from the installed package (no build step,
no CDN) that reads the API with the key the user gives it; and GET /redoc, offline.

* ``/ui`` is ``service/ui/static/index.html``; ``/ui/assets/<file>`` its scripts and styles
  (plain ES modules and CSS, system fonts), served by Starlette's ``StaticFiles`` (GET and HEAD,
  ETag and Last-Modified, no path outside the folder). The page holds no data: it calls the read routes
  (``/models``, ``/models/{name}/tasks``, ...) with ``Authorization: Bearer <read key>`` when
  the API asks for one, and never a write route.
* ``/redoc`` is FastAPI's Redoc page on fastapi-offline's installed ``redoc.standalone.js``,
  with the one address that bundle still fetches from the internet (the Redocly logo in its
  menu footer, ``cdn.redoc.ly``) replaced by an inline image, and a Content-Security-Policy
  that lets the page reach its own origin only.

The pages' Content-Security-Policy (``connect-src 'self'`` and so on) is the guarantee that
no request leaves the host, whatever a bundled script tries.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import Scope

router = APIRouter(tags=["dashboard"], include_in_schema=False)

STATIC = Path(__file__).resolve().parents[2] / "ui" / "static"

_HTML = "text/html; charset=utf-8"
_JS = "text/javascript; charset=utf-8"

#: The dashboard reaches its own origin only; styles and scripts are files (no inline code).
UI_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
#: Redoc injects its styles and runs its search in a blob: worker.
REDOC_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; worker-src 'self' blob:; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}

#: What redoc.standalone.js would fetch from the internet, and what it gets instead.
_REDOC_REMOTE = "https://cdn.redoc.ly/redoc/logo-mini.svg"
_BLANK_IMAGE = "data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"


class _Assets(StaticFiles):
    """The dashboard's files, each answered with the page's headers: revalidated on every load
    (``no-cache``, so a new release is picked up), no content sniffing, and the page's CSP
    (``index.html`` is reachable here too)."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update({**_HEADERS, "Content-Security-Policy": UI_CSP})
        return response


@router.get("/")
def home(request: Request) -> RedirectResponse:
    """The service's root leads to the dashboard (a 307: a browser or ``curl -L`` follows it)."""
    return RedirectResponse(f"{request.scope.get('root_path', '')}/ui", status_code=307)


@router.get("/ui")
def dashboard() -> FileResponse:
    return FileResponse(
        STATIC / "index.html", media_type=_HTML, headers={**_HEADERS, "Content-Security-Policy": UI_CSP}
    )


router.mount("/ui/assets", _Assets(directory=STATIC), name="ui-assets")


@lru_cache(maxsize=1)
def _redoc_js() -> bytes:
    import fastapi_offline

    text = (Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js").read_text("utf-8")
    return text.replace(_REDOC_REMOTE, _BLANK_IMAGE).encode("utf-8")


@router.get("/ui/vendor/redoc.standalone.js")
def redoc_js() -> Response:
    return Response(_redoc_js(), media_type=_JS, headers={"Cache-Control": "max-age=3600"})


@router.get("/redoc")
def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    page = get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}/ui/vendor/redoc.standalone.js",
        with_google_fonts=False,
        redoc_favicon_url=f"{root}/static-offline-docs/favicon.png",
    )
    return HTMLResponse(page.body, headers={**_HEADERS, "Content-Security-Policy": REDOC_CSP})
