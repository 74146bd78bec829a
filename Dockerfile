# safe-python-mcp in a container, for `docker run -i`. The build stage
# runs the README's `cargo install`; the runtime image is the slim Debian release the Rust image is
# built on, so the binary finds the glibc it was linked against.
FROM rust:1.95-slim-trixie AS build
WORKDIR /src
COPY . .
RUN cargo install --locked --path . --root /usr/local

FROM debian:trixie-slim
COPY --from=build /usr/local/bin/safe-python-mcp /usr/local/bin/safe-python-mcp
# Compile the guest into the image's cache now, so that a container answers its first call at once
# instead of after ~30 s; --check also fails the build if the sandbox does not work.
ENV SAFE_PYTHON_CACHE_DIR=/var/cache/safe-python-executor
RUN safe-python-mcp --check
CMD ["safe-python-mcp"]
