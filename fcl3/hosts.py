"""Spread a client's requests over the hosts of one FCL3 service (replicas with no load balancer
in front), failing over from a host that cannot be reached::

    import fcl3
    from fcl3.hosts import Spread

    hosts = ["http://10.0.0.11:8000", "http://10.0.0.12:8000", "http://10.0.0.13:8000"]
    with fcl3.Client(hosts[0], transport=Spread(hosts)) as c:   # AsyncClient: AsyncSpread
        c.learn("schools", "school-1", X, y)

Every replica answers for every model from the shared PostgreSQL and Redis, so any host can take
any request. :class:`Spread` (and :class:`AsyncSpread`, the same for ``AsyncClient`` or an
``httpx.AsyncClient``) is an httpx transport (written once, async, in ``fcl3/_async/hosts.py``; the sync one generated
by ``python -m fcl3._unasync``, as the clients are):

* each request goes to the host that is up with the fewest requests outstanding, the next in
  turn among equals (round robin while requests do not overlap); a host that hangs keeps its
  requests outstanding until they time out, so the others take the next ones. The request's
  scheme, host and port are the host's, its path and query its own (the client's URL names the
  first host; hosts are origins, ``scheme://host:port``);
* a request that could not be sent (connection refused, connect or pool timeout: nothing reached
  the host) goes to the next host at once, and the host is left out for ``cooldown`` seconds;
  when every host is out, each is tried again in turn;
* an error after the request was sent (the host died while answering, or did not answer within
  the client's timeout) also leaves the host out, but is raised: the request may have been
  applied, and whether resending is safe is the client's call (:mod:`fcl3.retries`: reads are
  resent, and batches, whose ``Idempotency-Key`` makes a resend apply nothing twice;
  ``predict(remember=True)`` is not). The resend goes to another host.

:attr:`Spread.served` counts the answers of each host, :attr:`Spread.failovers` the requests
moved to another host. With ``trust_env=True`` (httpx's default) and a proxy in the environment
(``HTTP_PROXY``, ...), httpx sends the matching requests to the proxy, not through this
transport: pass ``trust_env=False`` (or name the hosts in ``NO_PROXY``).
"""

from __future__ import annotations

from fcl3._async.hosts import AsyncSpread
from fcl3._routing import Hosts
from fcl3._sync.hosts import Spread

__all__ = ["Spread", "AsyncSpread", "Hosts"]
