# memledger dashboard.
#   docker build -t memledger .
#   docker run --rm -p 8501:8501 memledger        → http://localhost:8501
# The app keeps no state on the server beyond each browser session: the URL is the state.
FROM python:3.11-slim

# Chromium lets kaleido render the PNG/SVG exports on the server (the app works without it,
# and says so on the export buttons).
RUN apt-get update \
 && apt-get install -y --no-install-recommends chromium fonts-liberation \
 && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NUMBA_CACHE_DIR=/home/memledger/.cache/numba

RUN useradd --create-home --uid 10001 memledger
WORKDIR /app
COPY . /app
RUN pip install ".[export]" && chown -R memledger:memledger /app

USER memledger
# Compile the planner's numba pass once, into the user's cache (the app loads it at start)
RUN python -c "from memledger.planner.sweep import fused; fused.kernel()"
EXPOSE 8501
HEALTHCHECK --interval=30s --timeout=5s --start-period=40s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8501/_stcore/health', timeout=4)"]
CMD ["streamlit", "run", "app.py", "--server.address=0.0.0.0", "--server.port=8501"]
