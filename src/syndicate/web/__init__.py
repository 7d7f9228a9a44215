"""The web side: feeds over HTTP, article pages, subscribing and the links in readers' mail.

app.py builds the app and its routes; feeds.py serves the feed files; pages.py the pages,
as public.py renders them for serve and for ``build --site`` (static.py: the site as files);
readers.py subscribing and the token links; security.py CSRF, rate limits and headers;
server.py the listening socket and uvicorn.
"""

from .app import ArticleWatch, base_url_elsewhere, create_app, listening_url, watch_articles
from .context import MessageSender, WebContext
from .feeds import feed_content_type
from .server import bind, serve_app

__all__ = [
    "ArticleWatch",
    "MessageSender",
    "WebContext",
    "base_url_elsewhere",
    "bind",
    "create_app",
    "feed_content_type",
    "listening_url",
    "serve_app",
    "watch_articles",
]
