"""tdock.ray: tdock-server as a Ray actor, and a handle any task or actor can
use to reach it.

    import ray, tdock.ray
    ray.init()
    server = tdock.ray.start_server(name="tdock", config="examples/grpo.yaml")

    @ray.remote
    def rollout(server):                 # the handle pickles; its client is
        dock = server.dock("grpo")       # made in the process that uses it
        dock.put(...)

    ray.get(rollout.remote(server))
    other = tdock.ray.get_server("tdock")   # elsewhere: the same server, by name
    server.stop()

The actor runs tdock-server as its child process (tdock.server.LocalServer)
on its node: placed by `node_id` (node affinity, hard) or by `resources`
(custom resources the node advertises, e.g. {"tdock": 1}). It listens on the
node's IP address unless told otherwise, and the handle carries the address
it reports. The server dies with its actor. As Ray does with every actor
that is not detached, the actor ends when no handle to it is left: keep the
handle start_server returned (handles passed to tasks and actors count too),
or start it with detached=True and stop it with handle.stop().
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import ray

from tdock import errors
from tdock.client import Client, Dock
from tdock.server import LocalServer

# How long a restarted actor tries to start its server again: the former one
# drains for up to its shutdown grace after its heartbeat's last call.
_RESTART_START_S = 120.0

__all__ = ["ClusterHandle", "ServerHandle", "TdockServer", "get_server", "start_cluster",
           "start_server"]


class TdockServer:
    """The actor (see start_server): owns one tdock-server process. Runs as
    a synchronous actor: the server is started by, and dies with, the
    actor's main thread."""

    def __init__(self, listen: str | None, metrics_listen: str | None,
                 binary: str | None, data_dir: str | None, config: str | None,
                 args: list[str]):
        host = ray.util.get_node_ip_address()
        if data_dir is not None:  # on this node (a shard's: under its cluster's)
            os.makedirs(os.path.dirname(os.path.abspath(data_dir)), exist_ok=True)
        server = LocalServer(
            binary=binary, listen=listen or f"{host}:0",
            metrics_listen=metrics_listen if metrics_listen is not None else f"{host}:0",
            data_dir=data_dir, config=config, args=args)
        # Started again by Ray after its process died: the former server may
        # still hold the data dir's lock, or the port, while it shuts down
        # (it was sent SIGTERM). A constructor that raises ends the actor for
        # good, so the start is tried again for a while first.
        again = ray.get_runtime_context().was_current_actor_reconstructed
        give_up = time.monotonic() + (_RESTART_START_S if again else 0)
        while True:
            try:
                self._server = server.start()
                break
            except errors.Unavailable:
                if time.monotonic() >= give_up:
                    raise
                time.sleep(1)

    def address(self) -> str:
        return self._server.address

    def metrics_url(self) -> str | None:
        return self._server.metrics_url

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        """The tdock-server process's pid."""
        return self._server.process.pid

    def running(self) -> bool:
        return self._server.running()

    def stop(self) -> int:
        """Stops the server (SIGTERM: it drains its calls); its exit code."""
        return self._server.stop()


@dataclass
class ServerHandle:
    """A tdock server run by a TdockServer actor: its address, how to reach
    the actor (name and namespace) and the options of the clients it makes.
    Pickles (as an argument of a Ray task or actor, or otherwise); `client()`
    connects lazily, one Client per process."""

    name: str
    namespace: str | None
    address: str
    metrics_url: str | None = None
    client_options: dict = field(default_factory=dict)
    _actor: Any = field(default=None, repr=False, compare=False)
    _clients: dict = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_clients"] = {}  # channels stay in the process that opened them
        return state

    def client(self) -> Client:
        """This process's Client of the server (made on first use)."""
        pid = os.getpid()
        client = self._clients.get(pid)
        if client is None:
            client = self._clients[pid] = Client(self.address, **self.client_options)
        return client

    def dock(self, name: str) -> Dock:
        return self.client().dock(name)

    @property
    def actor(self) -> Any:
        """The TdockServer actor."""
        if self._actor is None:
            self._actor = ray.get_actor(self.name, namespace=self.namespace)
        return self._actor

    def stop(self) -> int:
        """Stops the server and ends its actor; the server's exit code."""
        actor = self.actor
        try:
            return ray.get(actor.stop.remote())
        finally:
            ray.kill(actor)


def start_server(name: str = "tdock", *, namespace: str | None = None,
                 binary: str | None = None, listen: str | None = None,
                 metrics_listen: str | None = None, data_dir: str | None = None,
                 config: str | None = None, args: Iterable[str] = (),
                 node_id: str | None = None, resources: dict | None = None,
                 num_cpus: float = 1, detached: bool = False,
                 client_options: dict | None = None,
                 timeout: float = 300.0, max_restarts: int = 0) -> ServerHandle:
    """Starts tdock-server in a named TdockServer actor and returns its handle
    once it listens.

    binary: the tdock-server on the actor's node (default $TDOCK_SERVER_BIN
      there, else the one a tdock wheel installed there carries, else PATH's:
      tdock.server.find_binary). listen / metrics_listen: default the node's IP, a
      free port. data_dir, config, args: the server's --data_dir, --config
      and further flags. node_id: run on that node (hard affinity);
      resources: custom resources the actor needs; num_cpus: CPUs reserved
      for it. detached: the actor outlives this driver (stop it with
      handle.stop()). client_options: what handle.client() passes to
      tdock.Client (token, tls, timeout, ...). timeout: how long to wait for
      the actor to be placed and the server to listen (Ray leaves an actor
      no node can take pending forever); then errors.DeadlineExceeded and
      the actor is killed. max_restarts: how many times Ray starts the actor
      again (-1: always) when its process dies, and with it the server, on
      its data dir (give a fixed `listen` so that its address stays).
    A name already taken by a live actor is errors.AlreadyExists."""
    if not ray.is_initialized():
        raise errors.FailedPrecondition("tdock.ray.start_server: ray.init() first")
    try:
        ray.get_actor(name, namespace=namespace)
        raise errors.AlreadyExists(
            f"a Ray actor named '{name}' already exists; tdock.ray.get_server('{name}') "
            "reaches it")
    except ValueError:
        pass  # no such actor: start it
    options: dict[str, Any] = {"name": name, "num_cpus": num_cpus,
                               "max_restarts": max_restarts}
    if namespace is not None:
        options["namespace"] = namespace
    if resources:
        options["resources"] = dict(resources)
    if node_id is not None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
    if detached:
        options["lifetime"] = "detached"
    actor = ray.remote(TdockServer).options(**options).remote(
        listen, metrics_listen, binary, data_dir, config, list(args))
    try:
        address, metrics_url = ray.get(
            [actor.address.remote(), actor.metrics_url.remote()], timeout=timeout)
    except ray.exceptions.RayActorError as e:
        raise errors.Unavailable(f"tdock-server actor '{name}' did not start: {e}") from None
    except ray.exceptions.GetTimeoutError:
        ray.kill(actor)
        raise errors.DeadlineExceeded(
            f"tdock-server actor '{name}' not running after {timeout} s: no node "
            f"could take it (num_cpus={num_cpus}, resources={resources}, "
            f"node_id={node_id})?") from None
    return ServerHandle(name, namespace, address, metrics_url, dict(client_options or {}),
                        actor)


def get_server(name: str = "tdock", *, namespace: str | None = None,
               client_options: dict | None = None) -> ServerHandle:
    """The handle of a server started by start_server, found by its actor's
    name (errors.NotFound when there is none)."""
    try:
        actor = ray.get_actor(name, namespace=namespace)
    except ValueError:
        raise errors.NotFound(f"no Ray actor named '{name}' (tdock.ray.start_server "
                              "starts one)") from None
    address, metrics_url = ray.get([actor.address.remote(), actor.metrics_url.remote()])
    return ServerHandle(name, namespace, address, metrics_url, dict(client_options or {}),
                        actor)


@dataclass
class ClusterHandle:
    """A controller and its shards, each run by a TdockServer actor
    (start_cluster). Pickles; `client()` connects to the controller, and
    names this process's Ray node (TDOCK_NODE) so that its Puts go to the
    shard on that node."""

    controller: ServerHandle
    shards: list

    @property
    def address(self) -> str:
        return self.controller.address

    def client(self) -> Client:
        # The shards are named by Ray node id: this process's is its node.
        os.environ["TDOCK_NODE"] = ray.get_runtime_context().get_node_id()
        return self.controller.client()

    def dock(self, name: str) -> Dock:
        return self.client().dock(name)

    def stop(self) -> int:
        """Stops the shards, then the controller; the first non-zero exit
        code, else 0. A shard whose actor is gone already (its node left the
        cluster) is passed over."""
        codes = []
        for server in [*self.shards, self.controller]:
            try:
                codes.append(server.stop())
            except (ray.exceptions.RayActorError, ValueError):
                pass  # the actor, and its server, are gone
        return next((code for code in codes if code), 0)


@ray.remote(num_cpus=0)
def _free_port_here() -> str:
    host = ray.util.get_node_ip_address()
    with socket.socket() as s:
        s.bind((host, 0))
        return f"{host}:{s.getsockname()[1]}"


def _free_address(node_id: str) -> str:
    """host:port free now on node `node_id` (its IP)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return ray.get(_free_port_here.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote())


def start_cluster(name: str = "tdock", *, namespace: str | None = None,
                  binary: str | None = None, data_dir: str | None = None,
                  config: str | None = None, controller_args: Iterable[str] = (),
                  shard_args: Iterable[str] = (), shard_resource: str | None = None,
                  controller_node_id: str | None = None, num_cpus: float = 1,
                  detached: bool = False, client_options: dict | None = None,
                  timeout: float = 300.0,
                  shard_data_dir: str | None = None,
                  shm_dir: str | None = None) -> ClusterHandle:
    """Starts a sharded tdock on the Ray cluster (docs/scale-out.md): the
    controller in an actor named `name` (on controller_node_id if given; its
    journal in data_dir, its docks from config), and one shard on every
    alive node, or on every node that advertises the custom resource
    `shard_resource`, each in an actor named `<name>-shard-<node id>` placed
    on its node (hard affinity) and registered under that node's id.
    controller_node_id defaults to this driver's node.
    With data_dir (on a disk that stays with that node), the controller's
    actor is started again whenever its process dies, on the same port of
    its node, and comes back from its journal; with shard_data_dir (each
    shard's cells in `<shard_data_dir>/<node id>` on its node), so is each
    shard's, with its cells, as the same incarnation. With shm_dir (a tmpfs
    directory on every node, e.g. /dev/shm: mind a container's small
    default), each shard keeps its cells there, as shared memory its node's
    tasks write and read without a socket (their transport auto or shm).
    Returns once every shard has registered. Other arguments as
    start_server's; errors as start_server's, and errors.Unavailable when no
    node takes a shard."""
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if shard_resource is not None:
        nodes = [n for n in nodes if n.get("Resources", {}).get(shard_resource, 0) > 0]
    if not nodes:
        raise errors.Unavailable(
            "tdock.ray.start_cluster: no alive node"
            + (f" advertises the resource '{shard_resource}'" if shard_resource else ""))
    controller_node = controller_node_id or ray.get_runtime_context().get_node_id()
    # Restarted, the controller must be where its shards and clients look.
    listen = _free_address(controller_node) if data_dir is not None else None
    controller = start_server(name, namespace=namespace, binary=binary, data_dir=data_dir,
                              config=config, args=["--role=controller", *controller_args],
                              node_id=controller_node, listen=listen,
                              num_cpus=num_cpus,
                              detached=detached, client_options=client_options,
                              timeout=timeout, max_restarts=-1 if data_dir is not None else 0)
    shards = []
    try:
        for node in nodes:
            node_id = node["NodeID"]
            shards.append(start_server(
                f"{name}-shard-{node_id}", namespace=namespace, binary=binary,
                data_dir=(os.path.join(shard_data_dir, node_id)
                          if shard_data_dir is not None else None),
                args=["--role=shard", f"--controller={controller.address}",
                      f"--node={node_id}",
                      *([f"--shm_dir={shm_dir}"] if shm_dir is not None else []),
                      *shard_args],
                node_id=node_id, num_cpus=0, detached=detached,
                client_options=client_options, timeout=timeout,
                max_restarts=-1 if shard_data_dir is not None else 0))
    except BaseException:
        ClusterHandle(controller, shards).stop()
        raise
    return ClusterHandle(controller, shards)

