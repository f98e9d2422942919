# The engram service image for docker-compose.yml (the tests do not use Docker).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY engram engram
COPY schemas schemas
COPY streams streams
COPY projections projections
COPY api api
RUN pip install --no-cache-dir .
ENV ENGRAM_API_HOST=0.0.0.0 ENGRAM_DATA_DIR=/data
EXPOSE 8000
CMD ["engram", "serve"]
