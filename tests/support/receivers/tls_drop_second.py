"""tls_drop_second.py: an HTTPS subscriber whose kept-alive connections die under the
client's next request, as when a server's idle timeout closes a connection just as a
request is written to it.

Usage: tls_drop_second.py PORT CERT KEY LOG

On each connection: the TLS handshake, the first request answered 200 with the
connection kept alive, then the next request read whole and the connection closed
without a byte of answer. Every request read is a line "CONN-NUMBER WEBHOOK-ID" in LOG,
so a test sees which request reached it on which connection. It plays the subscriber and
nothing else.
"""
import socket
import ssl
import sys
import threading


def read_request(conn):
    """One request's webhook-id, or None when the connection ended first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length, webhook_id = 0, "-"
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
        elif name.strip().lower() == b"webhook-id":
            webhook_id = value.strip().decode()
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return webhook_id


def serve(conn, number, log, lock):
    try:
        for answered in (True, False):
            webhook_id = read_request(conn)
            if webhook_id is None:
                return
            with lock:
                log.write(f"{number} {webhook_id}\n")
                log.flush()
            if answered:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    except (OSError, ssl.SSLError):
        pass
    finally:
        conn.close()


def main():
    port, cert, key, log_path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    lock = threading.Lock()
    with open(log_path, "a") as log:
        number = 0
        while True:
            raw, _ = listener.accept()
            number += 1
            try:
                conn = ctx.wrap_socket(raw, server_side=True)
            except (OSError, ssl.SSLError):
                raw.close()
                continue
            threading.Thread(target=serve, args=(conn, number, log, lock), daemon=True).start()


if __name__ == "__main__":
    main()
