// A TCP proxy the test controls, in front of the test's Postgres: it can drop every connection
// it carries silently (no FIN, no RST: bytes in both directions are swallowed, as after a NAT
// drop or with a frozen peer) and can leave new connections hanging (a dead network path).
//
//   const proxy = await startProxy(dbUrl);
//   const client = new SqlStreams({ connectionString: proxy.url });
//   proxy.dropExisting();   // what the client has open now goes silent
//   proxy.hangNew = true;   // new connections are accepted but never reach the server
//   await proxy.loseReply((sql) => sql.includes("record_range_")); // that statement runs and
//                           // commits on the server; its answer is thrown away, the link cut
import net from "node:net";

export interface TcpProxy {
  /** The database URL rewritten to go through the proxy. */
  url: string;
  port: number;
  /** New connections are accepted but never forwarded while true. */
  hangNew: boolean;
  /** Connections accepted so far. */
  accepted: number;
  /** Silently drops every connection open now: data is swallowed, sockets stay open. */
  dropExisting(): void;
  /**
   * The next client message whose text (latin1) satisfies `match` is forwarded; the server's
   * answer is read up to its ReadyForQuery, so the statement and its commit (autocommit, or a
   * COMMIT) have finished on the server, then thrown away, and both sockets are cut: a reply lost
   * after the commit. Resolves once that happened.
   */
  loseReply(match: (text: string) => boolean): Promise<void>;
  /** Closes every connection open now abruptly (both sides see the connection end). */
  closeExisting(): void;
  /** Closes the listener and destroys every socket. */
  close(): Promise<void>;
}

interface Losing {
  buf: Buffer;
  fired: () => void;
}

/** Parses backend messages (type byte, int32 length); true once ReadyForQuery ('Z') went by. */
function sawReadyForQuery(l: Losing, b: Buffer): boolean {
  l.buf = Buffer.concat([l.buf, b]);
  let at = 0;
  while (l.buf.length - at >= 5) {
    const type = l.buf[at];
    const len = l.buf.readInt32BE(at + 1);
    if (l.buf.length - at < 1 + len) break;
    at += 1 + len;
    if (type === 0x5a) return true;
  }
  l.buf = l.buf.subarray(at);
  return false;
}

interface Pair {
  client: net.Socket;
  server: net.Socket | null;
  dropped: boolean;
}

export async function startProxy(databaseUrl: string): Promise<TcpProxy> {
  const target = new URL(databaseUrl);
  const host = target.hostname || "127.0.0.1";
  const targetPort = Number(target.port || 5432);
  const pairs = new Set<Pair>();
  let armed: { match: (text: string) => boolean; fired: () => void } | null = null;
  const sockets = new Set<net.Socket>();
  const track = (s: net.Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
    s.on("error", () => {});
  };

  const server = net.createServer((client) => {
    track(client);
    proxy.accepted++;
    const pair: Pair = { client, server: null, dropped: false };
    pairs.add(pair);
    client.on("close", () => {
      pairs.delete(pair);
      if (!pair.dropped) pair.server?.destroy();
    });
    if (proxy.hangNew) {
      pair.dropped = true; // accepted, never forwarded
      client.on("data", () => {});
      return;
    }
    const upstream = net.connect(targetPort, host);
    track(upstream);
    pair.server = upstream;
    let losing: Losing | null = null;
    client.on("data", (b: Buffer) => {
      if (pair.dropped) return;
      if (armed && !losing && armed.match(b.toString("latin1"))) {
        losing = { buf: Buffer.alloc(0), fired: armed.fired };
        armed = null;
      }
      upstream.write(b);
    });
    upstream.on("data", (b: Buffer) => {
      if (pair.dropped) return;
      if (!losing) {
        client.write(b);
      } else if (sawReadyForQuery(losing, b)) {
        client.destroy();
        upstream.destroy();
        losing.fired();
      }
    });
    upstream.on("close", () => {
      if (!pair.dropped) client.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  const url = new URL(databaseUrl);
  url.hostname = "127.0.0.1";
  url.port = String(port);

  const proxy: TcpProxy = {
    url: url.toString(),
    port,
    hangNew: false,
    accepted: 0,
    dropExisting() {
      for (const p of pairs) p.dropped = true;
    },
    loseReply(match) {
      return new Promise<void>((resolve) => {
        armed = { match, fired: resolve };
      });
    },
    closeExisting() {
      for (const p of pairs) {
        p.client.destroy();
        p.server?.destroy();
      }
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}
